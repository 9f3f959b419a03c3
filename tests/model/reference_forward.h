#pragma once
// A plain fp32 Qwen2/Qwen3 forward over a WeightSource (full recomputation, no cache), written from the HF
// modeling code's math. It lets these tests check that random checkpoints give non-trivial outputs without
// depending on the engine's backends.
#include <cstdint>
#include <vector>

#include "model/hf_config.h"
#include "model/weight_source.h"

namespace nanovllm::testing {

// Logits [tokens.size()][vocab] of every position.
std::vector<std::vector<float>> reference_logits(const ModelConfig& config, WeightSource& weights,
                                                 const std::vector<int32_t>& tokens);

}  // namespace nanovllm::testing
