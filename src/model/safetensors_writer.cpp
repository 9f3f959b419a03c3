#include "model/safetensors_writer.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace nanovllm {

size_t TensorRecord::bytes() const {
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

size_t write_safetensors(const std::filesystem::path& path, const std::vector<TensorRecord>& tensors,
                         const TensorProducer& produce, const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const TensorRecord& t : tensors) {
    if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F8_E4M3)
      throw EngineError("write_safetensors: tensor '" + t.name + "' has dtype " + dtype_name(t.dtype));
    if (header.contains(t.name)) throw EngineError("write_safetensors: tensor '" + t.name + "' given twice");
    header[t.name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes()}}};
    offset += t.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw EngineError(path.string() + ": cannot be created");
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out.write(length, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<std::byte> buffer;
  for (size_t i = 0; i < tensors.size(); ++i) {
    buffer.assign(tensors[i].bytes(), std::byte{0});
    produce(i, buffer);
    out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()));
  }
  out.flush();
  if (!out) throw EngineError(path.string() + ": write failed");
  return 8 + text.size() + offset;
}

}  // namespace nanovllm
