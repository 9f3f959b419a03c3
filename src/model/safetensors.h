#pragma once
// Reading Hugging Face safetensors weights: one memory-mapped file (SafetensorsFile) and the weights of a
// model folder, single file or sharded (CheckpointReader). Every header field is validated on open, so a
// view handed out is always inside the mapping.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/dtype.h"
#include "model/mapped_file.h"

namespace nanovllm {

// A tensor's bytes on the host (row-major), borrowed from whoever owns them. Mapped data is aligned to its
// element size in files the safetensors library writes (header padded to 8 bytes), but the format does not
// promise it: copy with memcpy rather than dereferencing wide pointers into a mapping.
struct HostTensorView {
  const void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  std::string shape_string() const;  // "[3, 4]"
};

// "[3, 4]"
std::string shape_to_string(const std::vector<int64_t>& shape);

// The elements of an F32, BF16 or F16 view as fp32 (read with memcpy: mapped data may be unaligned). Throws
// EngineError for another dtype: callers check the dtypes they accept first, in their own terms.
std::vector<float> floats_of(const HostTensorView& view);

class SafetensorsFile {
 public:
  // Throws InvalidInput naming the file for a bad header, unsupported dtype or truncated data.
  static SafetensorsFile open(const std::filesystem::path& path);

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws InvalidInput "<file>: has no tensor 'x'". The view lives as long as this object.
  HostTensorView get(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const std::filesystem::path& path() const { return path_; }
  // The free-form "__metadata__" string map of the header (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    size_t offset;  // from the start of the file
    size_t bytes;
  };
  // Throws InvalidInput when two tensors' data ranges overlap.
  void check_disjoint() const;
  SafetensorsFile(std::filesystem::path path, MappedFile mapping)
      : path_(std::move(path)), mapping_(std::move(mapping)) {}

  std::filesystem::path path_;
  MappedFile mapping_;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The weights of a model folder: model.safetensors; or the shards that model.safetensors.index.json's
// weight_map names; or, when neither exists, every *.safetensors file in the folder.
class CheckpointReader {
 public:
  static CheckpointReader open(const std::filesystem::path& dir);

  bool contains(const std::string& name) const { return location_.count(name) != 0; }
  // Throws InvalidInput "checkpoint has no tensor 'x'". The view lives as long as this object.
  HostTensorView get(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  // The file that holds tensor `name` (which must exist).
  const std::filesystem::path& file_of(const std::string& name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, size_t> location_;  // tensor name -> index into files_
};

}  // namespace nanovllm
