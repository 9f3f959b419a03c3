#include "model/kv_cache_scales.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm {
namespace {

float scalar_scale(const HostTensorView& view, const std::string& tensor) {
  const std::string where = "tensor " + quoted_text(tensor);
  if (view.numel() != 1 || view.shape.size() > 1)
    throw InvalidInput(where + " must be a scalar (shape [] or [1]), got " + view.shape_string());
  if (view.dtype != DType::F32 && view.dtype != DType::BF16 && view.dtype != DType::F16)
    throw InvalidInput(where + " has dtype " + dtype_name(view.dtype) + ", expected F32, BF16 or F16");
  const float value = floats_of(view)[0];
  if (!std::isfinite(value) || value <= 0.0f)
    throw InvalidInput(where + " is " + std::to_string(value) + ", expected a positive finite scale");
  return value;
}

}  // namespace

std::vector<KvCacheScale> load_kv_cache_scales(WeightSource& weights, const ModelConfig& config) {
  std::vector<KvCacheScale> scales(static_cast<size_t>(config.num_hidden_layers));
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".self_attn.";
    for (auto [name, target] : {std::pair{"k_scale", &scales[i].k}, std::pair{"v_scale", &scales[i].v}}) {
      const std::string tensor = prefix + name;
      if (weights.contains(tensor)) *target = scalar_scale(weights.get_as_stored(tensor).view, tensor);
    }
  }
  return scales;
}

}  // namespace nanovllm
