#pragma once
// Writes a random-weight Hugging Face model folder (config.json, generation_config.json, safetensors weights,
// optionally the tokenizer files), byte-for-byte reproducible from the config and the seed.
#include <cstdint>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "model/dummy_values.h"
#include "model/weight_quantization.h"

namespace nanovllm {

struct RandomCheckpointOptions {
  nlohmann::json config;  // a config.json; must parse as ModelConfig
  uint64_t seed = 0;
  int shards = 1;             // 1: model.safetensors; K > 1: model-0000i-of-0000K + index
  DType dtype = DType::BF16;  // F32 or BF16 on disk; values are BF16-exact either way
  // kFp8: the decoder layers' linear weights written in block-scaled FP8 (F8_E4M3 + F32 weight_scale_inv, and
  // config.json's quantization_config), quantised from the same BF16 values; also when the config says fp8.
  WeightQuantization::Method quantization = WeightQuantization::Method::kNone;
  DummyWeightScales scales;
  std::optional<std::filesystem::path> tokenizer_dir;  // copies tokenizer.json (+ tokenizer_config.json)
};

// Creates out_dir when needed and replaces any weights already there. Throws InvalidInput for a bad config or
// option, EngineError when writing fails.
void write_random_checkpoint(const RandomCheckpointOptions& options, const std::filesystem::path& out_dir);

}  // namespace nanovllm
