#include "model/kv_cache_scales.h"

#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "common/half_float.h"

namespace nanovllm {
namespace {

float scalar_value(const HostTensorView& view, const std::string& where) {
  if (view.numel() != 1 || view.shape.size() > 1)
    throw InvalidInput(where + " must be a scalar (shape [] or [1]), got " + view.shape_string());
  float value = 0.0f;
  uint16_t half = 0;
  switch (view.dtype) {
    case DType::F32:
      std::memcpy(&value, view.data, sizeof value);
      break;
    case DType::BF16:
      std::memcpy(&half, view.data, sizeof half);
      value = bf16_to_float(half);
      break;
    case DType::F16:
      std::memcpy(&half, view.data, sizeof half);
      value = f16_to_float(half);
      break;
    default:
      throw InvalidInput(where + " has dtype " + dtype_name(view.dtype) + ", expected F32, BF16 or F16");
  }
  if (!std::isfinite(value) || value <= 0.0f)
    throw InvalidInput(where + " is " + std::to_string(value) + ", expected a positive finite scale");
  return value;
}

}  // namespace

std::vector<KvCacheScale> load_kv_cache_scales(const WeightSource& weights, const ModelConfig& config) {
  std::vector<KvCacheScale> scales(static_cast<size_t>(config.num_hidden_layers));
  const auto* checkpoint = dynamic_cast<const CheckpointWeights*>(&weights);
  if (checkpoint == nullptr) return scales;  // generated weights have no scales
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".self_attn.";
    for (auto [name, target] : {std::pair{"k_scale", &scales[i].k}, std::pair{"v_scale", &scales[i].v}}) {
      const std::string tensor = prefix + name;
      if (!checkpoint->contains(tensor)) continue;
      const std::string where = checkpoint->reader().file_of(tensor).string() + ": tensor '" + tensor + "'";
      *target = scalar_value(checkpoint->reader().get(tensor), where);
    }
  }
  return scales;
}

}  // namespace nanovllm
