#pragma once
// The parts of a Hugging Face config.json (and generation_config.json) that the Qwen2/Qwen3 model needs.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "common/json_parse.h"  // read_json_file
#include "model/weight_quantization.h"

namespace nanovllm {

struct ModelConfig {
  std::string architecture;  // "Qwen3ForCausalLM" | "Qwen2ForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  int max_position_embeddings = 32768;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q, k, v projections carry biases (always on Qwen2)
  bool qk_norm = false;         // per-head RMSNorm of q and k (Qwen3 yes, Qwen2 no)
  DType torch_dtype = DType::BF16;
  WeightQuantization quantization;  // of the decoder layers' linear weights
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;

  // generation_config may be null. Throws InvalidInput naming the field and "config.json".
  static ModelConfig from_json(const nlohmann::json& config, const nlohmann::json* generation_config);
  // Reads dir/config.json and, when present, dir/generation_config.json.
  static ModelConfig from_dir(const std::filesystem::path& dir);

  // A complete HF-style config.json: every field explicit, so HF's defaults never decide anything.
  nlohmann::json to_json() const;

  int q_size() const { return num_attention_heads * head_dim; }
  int kv_size() const { return num_key_value_heads * head_dim; }
  bool is_qwen3() const { return architecture == "Qwen3ForCausalLM"; }
};

// "bfloat16" | "float16" | "float32" -> DType; anything else throws InvalidInput naming `what`.
DType dtype_from_torch_name(const std::string& name, const std::string& what);
// DType::BF16 -> "bfloat16" etc.
const char* torch_dtype_name(DType dtype);

}  // namespace nanovllm
