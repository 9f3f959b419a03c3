#pragma once
// Deterministic pseudo-random parameter values, vLLM's load_format=dummy in spirit but scaled so that
// activations stay O(1) and logits spread over a few nats. Each element is a counter-based hash of
// (seed, tensor name, element index), so the values do not depend on thread count or generation order.
#include <cstdint>
#include <string>

#include "model/parameter_layout.h"

namespace nanovllm {

struct DummyWeightScales {
  float matrix_gain = 1.0f;  // projection std = gain / sqrt(fan_in): outputs keep the inputs' scale
  float logits_gain = 2.5f;  // embedding / lm_head std = gain / sqrt(hidden): logits std ≈ gain nats
  float norm_spread = 0.1f;  // norm weights uniform in 1 ± spread
  float bias_std = 0.02f;
};

// Fills out[0, numel) with BF16 values of `spec` (numel must equal its element count). OpenMP-parallel.
void fill_dummy_bf16(const ParameterSpec& spec, uint64_t seed, const DummyWeightScales& scales, uint16_t* out);
// The same values, only the block rows [row_begin, row_end) × columns [col_begin, col_end) of the parameter
// seen as [shape[0], rest] (a 1-D parameter is one column), row-major into out: a tensor-parallel rank
// generates just its shard.
void fill_dummy_bf16_block(const ParameterSpec& spec, uint64_t seed, const DummyWeightScales& scales, int64_t row_begin,
                           int64_t row_end, int64_t col_begin, int64_t col_end, uint16_t* out);

}  // namespace nanovllm
