#pragma once
// A small Qwen3 config that FP8 weights fit: head_dim 128 and an intermediate size of 128 per rank for two
// tensor-parallel ranks, so every fused part and every shard falls on 128 x 128 scale blocks; hidden size 200,
// so the blocks along it are partial.
#include <nlohmann/json.hpp>

namespace nanovllm::testing {

inline nlohmann::json fp8_friendly_config() {
  return nlohmann::json{{"architectures", {"Qwen3ForCausalLM"}},
                        {"vocab_size", 300},
                        {"hidden_size", 200},
                        {"intermediate_size", 256},
                        {"num_hidden_layers", 2},
                        {"num_attention_heads", 2},
                        {"num_key_value_heads", 2},
                        {"head_dim", 128},
                        {"max_position_embeddings", 512},
                        {"tie_word_embeddings", false},
                        {"eos_token_id", 299}};
}

inline nlohmann::json fp8_quantization_config() {
  return nlohmann::json{
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
}

}  // namespace nanovllm::testing
