#pragma once
// Every parameter a Qwen2/Qwen3 checkpoint holds, by its Hugging Face name, with its shape: the one list that
// dummy weights, the checkpoint writer and the tests agree on.
#include <cstdint>
#include <string>
#include <vector>

#include "model/hf_config.h"

namespace nanovllm {

enum class ParameterKind { Embedding, LmHead, Matrix, Norm, Bias };

struct ParameterSpec {
  std::string name;
  std::vector<int64_t> shape;
  ParameterKind kind;
  int64_t fan_in;  // inputs summed per output element (the last dimension of a matrix); 1 for vectors
};

// In checkpoint order: embed_tokens, then per layer, then model.norm, then lm_head (absent when tied).
std::vector<ParameterSpec> parameter_layout(const ModelConfig& config);

}  // namespace nanovllm
