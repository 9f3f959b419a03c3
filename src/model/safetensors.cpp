#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "common/checked_number.h"
#include "common/error.h"
#include "common/half_float.h"
#include "common/json_parse.h"
#include "common/quoted.h"

namespace nanovllm {
namespace {

using nlohmann::json;

// A header larger than this is not a header of a real checkpoint (Qwen3-32B's is ~50 KiB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// No tensor of a real checkpoint has more elements (a 2^40-element tensor alone would be 2 TiB in BF16).
constexpr uint64_t kMaxTensorElements = 1ull << 40;

bool parse_dtype(const std::string& name, DType& out) {
  if (name == "F32") out = DType::F32;
  else if (name == "BF16") out = DType::BF16;
  else if (name == "F16") out = DType::F16;
  else if (name == "F8_E4M3") out = DType::F8_E4M3;  // block-scaled FP8 linear weights
  else return false;
  return true;
}

uint64_t read_le_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

int64_t HostTensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> floats_of(const HostTensorView& view) {
  const auto n = static_cast<size_t>(view.numel());
  std::vector<float> out(n);
  const auto* bytes = static_cast<const std::byte*>(view.data);
  switch (view.dtype) {
    case DType::F32:
      std::memcpy(out.data(), bytes, n * sizeof(float));
      break;
    case DType::BF16:
    case DType::F16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, sizeof bits);
        out[i] = view.dtype == DType::BF16 ? bf16_to_float(bits) : f16_to_float(bits);
      }
      break;
    default:
      throw EngineError(std::string("floats_of: ") + dtype_name(view.dtype) + " is not a float dtype");
  }
  return out;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string HostTensorView::shape_string() const { return shape_to_string(shape); }

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file(path, MappedFile::open(path));
  const std::string where = path.string() + ": ";
  const size_t file_size = file.mapping_.size();
  if (file_size < 8) throw InvalidInput(where + "bad header: the file is " + std::to_string(file_size) + " bytes long");
  const uint64_t header_len = read_le_u64(file.mapping_.data());
  if (header_len > kMaxHeaderBytes || header_len > file_size - 8)
    throw InvalidInput(where + "bad header: header length " + std::to_string(header_len) + " exceeds the file size (" +
                       std::to_string(file_size) + ") or 100 MiB");
  const char* header_text = reinterpret_cast<const char*>(file.mapping_.data() + 8);
  // A repeated tensor name would leave one of two data ranges unowned and the other silently chosen.
  const json header =
      parse_json(std::string_view(header_text, header_len), where + "bad header", DuplicateKeys::kReject);
  if (!header.is_object()) throw InvalidInput(where + "bad header: not a JSON object");

  const size_t data_start = 8 + header_len;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (info.is_object())
        for (const auto& [key, value] : info.items())
          if (value.is_string()) file.metadata_[key] = value.get<std::string>();
      continue;
    }
    const std::string tensor = where + "tensor " + quoted_text(name) + " ";
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
      throw InvalidInput(tensor + "has a malformed entry (needs dtype, shape, data_offsets): " + quoted_json(info));
    const json& dtype_field = info["dtype"];
    const std::string dtype_name = dtype_field.is_string() ? dtype_field.get<std::string>() : dtype_field.dump();
    Entry entry{DType::F32, {}, 0, 0};
    if (!parse_dtype(dtype_name, entry.dtype))
      throw InvalidInput(tensor + "has dtype " + quoted_text(dtype_name) +
                         ", which is not supported (supported: F32, BF16, F16, F8_E4M3)");
    const json& shape = info["shape"];
    if (!shape.is_array()) throw InvalidInput(tensor + "has a malformed shape: " + quoted_json(shape));
    // The running product is checked at every step: [2^32, 2^32] must not wrap to 0.
    uint64_t numel = 1;
    for (const json& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > kMaxTensorElements)
        throw InvalidInput(tensor + "has a malformed shape: " + quoted_json(shape));
      entry.shape.push_back(d.get<int64_t>());
      if (!multiply_fits(numel, d.get<uint64_t>(), numel) || numel > kMaxTensorElements)
        throw InvalidInput(tensor + "has shape " + quoted_json(shape) + " with more than 2^40 elements");
    }
    const json& offsets = info["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned() || offsets[0].get<uint64_t>() > offsets[1].get<uint64_t>())
      throw InvalidInput(tensor + "has malformed data_offsets: " + quoted_json(offsets));
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    const uint64_t expected_bytes = numel * dtype_size(entry.dtype);
    if (end - begin != expected_bytes)
      throw InvalidInput(tensor + "has shape " + shape_to_string(entry.shape) + " of " + dtype_name + " (" +
                         std::to_string(expected_bytes) + " bytes) but data_offsets [" + std::to_string(begin) + ", " +
                         std::to_string(end) + ") span " + std::to_string(end - begin) + " bytes");
    if (end > file_size - data_start)
      throw InvalidInput(tensor + "data [" + std::to_string(data_start + begin) + ", " +
                         std::to_string(data_start + end) + ") lies past the end of the file (size " +
                         std::to_string(file_size) + "); the file is truncated");
    entry.offset = data_start + begin;
    entry.bytes = end - begin;
    file.tensors_.emplace(name, std::move(entry));
  }
  file.check_disjoint();
  return file;
}

// Two tensors sharing bytes means a corrupt or hostile header: writing through one would change the other.
void SafetensorsFile::check_disjoint() const {
  std::vector<std::pair<const std::string*, const Entry*>> by_offset;
  for (const auto& [name, entry] : tensors_)
    if (entry.bytes != 0) by_offset.emplace_back(&name, &entry);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.second->offset < b.second->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto& [prev_name, prev] = by_offset[i - 1];
    const auto& [name, entry] = by_offset[i];
    if (entry->offset < prev->offset + prev->bytes)
      throw InvalidInput(path_.string() + ": tensors " + quoted_text(*prev_name) + " and " + quoted_text(*name) +
                         " overlap in data_offsets");
  }
}

HostTensorView SafetensorsFile::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw InvalidInput(path_.string() + ": has no tensor " + quoted_text(name));
  return HostTensorView{mapping_.data() + it->second.offset, it->second.dtype, it->second.shape};
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

CheckpointReader CheckpointReader::open(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw InvalidInput("model folder '" + dir.string() + "' does not exist");
  CheckpointReader reader;
  const fs::path single = dir / "model.safetensors";
  const fs::path index_path = dir / "model.safetensors.index.json";

  if (fs::exists(single)) {
    reader.files_.push_back(SafetensorsFile::open(single));
  } else if (fs::exists(index_path)) {
    const json index = read_json_file(index_path);
    const auto weight_map = index.find("weight_map");
    if (weight_map == index.end() || !weight_map->is_object())
      throw InvalidInput(index_path.string() + ": has no 'weight_map' object");
    std::map<std::string, size_t> shard_of_file;
    for (const auto& [name, shard] : weight_map->items()) {
      if (!shard.is_string())
        throw InvalidInput(index_path.string() + ": weight_map[" + quoted_text(name) + "] is not a file name");
      const fs::path shard_name = shard.get<std::string>();
      if (shard_name.is_absolute() || shard_name.filename() != shard_name)
        throw InvalidInput(index_path.string() + ": shard " + quoted_text(shard_name.string()) +
                           " is not a file name in the folder");
      auto [it, fresh] = shard_of_file.emplace(shard_name.string(), reader.files_.size());
      if (fresh) {
        const fs::path shard_path = dir / shard_name;
        if (!fs::exists(shard_path))
          throw InvalidInput(index_path.string() + ": lists shard " + quoted_text(shard_name.string()) +
                             ", which is missing");
        reader.files_.push_back(SafetensorsFile::open(shard_path));
      }
      if (!reader.files_[it->second].contains(name))
        throw InvalidInput(index_path.string() + ": says tensor " + quoted_text(name) + " is in " +
                           quoted_text(shard_name.string()) + ", but that shard has no such tensor");
      reader.location_.emplace(name, it->second);
    }
    if (reader.files_.empty()) throw InvalidInput(index_path.string() + ": weight_map is empty");
    return reader;
  } else {
    std::vector<fs::path> paths;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file() && entry.path().extension() == ".safetensors") paths.push_back(entry.path());
    std::sort(paths.begin(), paths.end());
    for (const auto& path : paths) reader.files_.push_back(SafetensorsFile::open(path));
  }

  if (reader.files_.empty()) throw InvalidInput("no .safetensors weights in '" + dir.string() + "'");
  for (size_t i = 0; i < reader.files_.size(); ++i)
    for (const auto& name : reader.files_[i].names())
      if (!reader.location_.emplace(name, i).second)
        throw InvalidInput("tensor " + quoted_text(name) + " appears in both " +
                           reader.files_[reader.location_[name]].path().string() + " and " +
                           reader.files_[i].path().string());
  return reader;
}

HostTensorView CheckpointReader::get(const std::string& name) const {
  auto it = location_.find(name);
  if (it == location_.end()) throw InvalidInput("checkpoint has no tensor " + quoted_text(name));
  return files_[it->second].get(name);
}

const std::filesystem::path& CheckpointReader::file_of(const std::string& name) const {
  auto it = location_.find(name);
  if (it == location_.end()) throw InvalidInput("checkpoint has no tensor " + quoted_text(name));
  return files_[it->second].path();
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  out.reserve(location_.size());
  for (const auto& entry : location_) out.push_back(entry.first);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace nanovllm
