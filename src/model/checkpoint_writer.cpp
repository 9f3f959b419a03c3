#include "model/checkpoint_writer.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>

#include "common/error.h"
#include "common/half_float.h"
#include "model/fp8_block_quantizer.h"
#include "model/hf_config.h"
#include "model/parameter_layout.h"
#include "model/safetensors_writer.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush()) throw EngineError(path.string() + ": write failed");
}

// The given config with every field the engine reads made explicit, so HF and nanovllm cannot disagree
// about a default; fields we do not know are kept as given.
json normalised_config(const json& given, const ModelConfig& config) {
  json out = given;
  out.erase("dtype");
  out.update(config.to_json());
  return out;
}

json generation_config(const ModelConfig& config) {
  json out = json::object();
  if (config.bos_token_id) out["bos_token_id"] = *config.bos_token_id;
  if (config.eos_token_ids.size() == 1) out["eos_token_id"] = config.eos_token_ids[0];
  else if (!config.eos_token_ids.empty()) out["eos_token_id"] = config.eos_token_ids;
  return out;
}

// Splits the parameters into `shards` contiguous runs of roughly equal bytes, each non-empty.
std::vector<std::vector<size_t>> split_into_shards(const std::vector<size_t>& bytes, int shards) {
  size_t total = 0;
  for (size_t b : bytes) total += b;
  std::vector<std::vector<size_t>> out(static_cast<size_t>(shards));
  size_t shard = 0, filled = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!out[shard].empty() && shard + 1 < out.size()) {
      const bool share_reached = filled * out.size() >= total * (shard + 1);
      const bool one_left_per_shard = bytes.size() - i == out.size() - 1 - shard;
      if (share_reached || one_left_per_shard) ++shard;
    }
    out[shard].push_back(i);
    filled += bytes[i];
  }
  return out;
}

// model.safetensors, model.safetensors.index.json or model-0000i-of-0000K.safetensors.
bool is_weights_file(const std::string& name) {
  if (name == "model.safetensors" || name == "model.safetensors.index.json") return true;
  return name.starts_with("model-") && name.ends_with(".safetensors") && name.find("-of-") != std::string::npos;
}

void remove_old_weights(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && is_weights_file(entry.path().filename().string())) fs::remove(entry.path());
}

// One tensor of the file: a parameter as generated, or (FP8) a quantised weight's codes or block scales.
enum class Stored { kValues, kFp8Codes, kFp8Scales };
struct StoredTensor {
  TensorRecord record;
  size_t spec;  // index into the layout
  Stored stored;
};

std::vector<StoredTensor> stored_tensors(const std::vector<ParameterSpec>& layout, const ModelConfig& config,
                                         DType dtype) {
  constexpr std::string_view kWeight = ".weight";
  std::vector<StoredTensor> out;
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParameterSpec& spec = layout[i];
    const std::string module = spec.name.substr(0, spec.name.size() - kWeight.size());
    if (spec.kind != ParameterKind::Matrix || !config.quantization.quantizes(module)) {
      out.push_back({{spec.name, dtype, spec.shape}, i, Stored::kValues});
      continue;
    }
    out.push_back({{spec.name, DType::F8_E4M3, spec.shape}, i, Stored::kFp8Codes});
    out.push_back({{module + ".weight_scale_inv", DType::F32, {fp8_blocks(spec.shape[0]), fp8_blocks(spec.shape[1])}},
                   i,
                   Stored::kFp8Scales});
  }
  return out;
}

}  // namespace

void write_random_checkpoint(const RandomCheckpointOptions& options, const fs::path& out_dir) {
  ModelConfig config = ModelConfig::from_json(options.config, nullptr);
  if (options.dtype != DType::F32 && options.dtype != DType::BF16)
    throw InvalidInput("random checkpoint: dtype must be float32 or bfloat16");
  config.torch_dtype = options.dtype;
  if (options.quantization == WeightQuantization::Method::kFp8)
    config.quantization.method = WeightQuantization::Method::kFp8;
  const std::vector<ParameterSpec> layout = parameter_layout(config);
  if (options.shards < 1 || static_cast<size_t>(options.shards) > layout.size())
    throw InvalidInput("random checkpoint: --shards must be in [1, " + std::to_string(layout.size()) + "], got " +
                       std::to_string(options.shards));

  fs::create_directories(out_dir);
  remove_old_weights(out_dir);
  write_text(out_dir / "config.json", normalised_config(options.config, config).dump(2) + "\n");
  write_text(out_dir / "generation_config.json", generation_config(config).dump(2) + "\n");

  const std::vector<StoredTensor> tensors = stored_tensors(layout, config, options.dtype);
  std::vector<TensorRecord> records;
  std::vector<size_t> bytes;
  for (const StoredTensor& t : tensors) {
    records.push_back(t.record);
    bytes.push_back(t.record.bytes());
  }
  // Values are generated in BF16 (the dummy generator's format) and widened exactly when F32 is asked for, or
  // quantised; a weight's scales follow its codes, so the one quantisation serves both.
  std::optional<std::pair<size_t, Fp8Matrix>> quantized;
  auto produce = [&](const std::vector<size_t>& members) {
    return [&, members](size_t index, std::vector<std::byte>& out) {
      const StoredTensor& t = tensors[members[index]];
      const ParameterSpec& spec = layout[t.spec];
      const size_t numel = static_cast<size_t>(HostTensorView{nullptr, DType::BF16, spec.shape}.numel());
      std::vector<uint16_t> values(numel);
      if (t.stored == Stored::kValues || !quantized || quantized->first != t.spec) {
        fill_dummy_bf16(spec, options.seed, options.scales, values.data());
        if (t.stored != Stored::kValues)
          quantized.emplace(t.spec, quantize_fp8_blocks(HostTensorView{values.data(), DType::BF16, spec.shape}));
      }
      if (t.stored == Stored::kFp8Codes) {
        std::memcpy(out.data(), quantized->second.codes.data(), out.size());
      } else if (t.stored == Stored::kFp8Scales) {
        std::memcpy(out.data(), quantized->second.scales.data(), out.size());
      } else if (options.dtype == DType::BF16) {
        std::memcpy(out.data(), values.data(), out.size());
      } else {
        for (size_t i = 0; i < numel; ++i) {
          const float f = bf16_to_float(values[i]);
          std::memcpy(out.data() + 4 * i, &f, 4);
        }
      }
    };
  };
  const std::map<std::string, std::string> metadata{{"format", "pt"}};

  if (options.shards == 1) {
    std::vector<size_t> all(tensors.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    write_safetensors(out_dir / "model.safetensors", records, produce(all), metadata);
  } else {
    json weight_map = json::object();
    size_t total_size = 0;
    const auto groups = split_into_shards(bytes, options.shards);
    for (size_t s = 0; s < groups.size(); ++s) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, groups.size());
      std::vector<TensorRecord> shard_records;
      for (size_t i : groups[s]) {
        shard_records.push_back(records[i]);
        weight_map[records[i].name] = name;
        total_size += bytes[i];
      }
      write_safetensors(out_dir / name, shard_records, produce(groups[s]), metadata);
    }
    const json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
    write_text(out_dir / "model.safetensors.index.json", index.dump(2) + "\n");
  }

  if (options.tokenizer_dir) {
    const fs::path& from = *options.tokenizer_dir;
    if (!fs::exists(from / "tokenizer.json"))
      throw InvalidInput("tokenizer folder '" + from.string() + "' has no tokenizer.json");
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
      if (fs::exists(from / file)) fs::copy_file(from / file, out_dir / file, fs::copy_options::overwrite_existing);
  }
}

}  // namespace nanovllm
