#pragma once
// Writes one safetensors file, streaming: the header first, then each tensor's bytes as its producer fills them,
// so a checkpoint larger than memory can be written one tensor at a time.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace nanovllm {

struct TensorRecord {
  std::string name;
  DType dtype;  // F32, BF16, F16 or F8_E4M3
  std::vector<int64_t> shape;
  size_t bytes() const;
};

// Fills `out` (already sized to the tensor's bytes) with the data of tensors[index].
using TensorProducer = std::function<void(size_t index, std::vector<std::byte>& out)>;

// Data is laid out in the order given; the header is padded with spaces to a multiple of 8 bytes, as the
// format asks. Throws EngineError when the file cannot be written. Returns the file size.
size_t write_safetensors(const std::filesystem::path& path, const std::vector<TensorRecord>& tensors,
                         const TensorProducer& produce, const std::map<std::string, std::string>& metadata = {});

}  // namespace nanovllm
