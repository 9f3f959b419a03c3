#pragma once
// The per-layer scales of an FP8 KV cache as a checkpoint stores them: model.layers.<i>.self_attn.k_scale and
// .v_scale (vLLM's names), scalars with stored value = value / scale.
#include <vector>

#include "model/hf_config.h"
#include "model/weight_source.h"

namespace nanovllm {

struct KvCacheScale {
  float k = 1.0f;
  float v = 1.0f;
};

// One entry per layer: the checkpoint's scales where it has them, 1.0 where it does not (vLLM's default: a
// cache written without calibration, exact for values FP8 holds as they are). Throws InvalidInput naming the
// tensor for a scale that is not a scalar float, not finite or not positive.
std::vector<KvCacheScale> load_kv_cache_scales(WeightSource& weights, const ModelConfig& config);

}  // namespace nanovllm
