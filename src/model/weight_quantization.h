#pragma once
// How a checkpoint stores the linear weights of its decoder layers: config.json's "quantization_config". The one
// format read is Qwen's (and DeepSeek's) block-scaled FP8: quant_method "fp8", fmt "e4m3", dynamic activations,
// one scale per 128 x 128 weight block (docs/fp8.md).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanovllm {

struct WeightQuantization {
  enum class Method { kNone, kFp8 };
  Method method = Method::kNone;
  // Modules kept unquantised (their weights stay BF16 in an FP8 checkpoint), by dotted module name: an entry
  // names a module when it is the whole name, a leading or a trailing run of its dot-separated parts
  // ("lm_head", "model.layers.0", "mlp.down_proj").
  std::vector<std::string> modules_to_not_convert;

  bool fp8() const { return method == Method::kFp8; }
  // Whether `module` (e.g. "model.layers.3.self_attn.q_proj") is a linear this quantization covers.
  bool quantizes(const std::string& module) const;

  // Parses quantization_config; throws InvalidInput naming the field and value for what is not Qwen's FP8.
  static WeightQuantization from_json(const nlohmann::json& quantization_config);
  // The quantization_config of an FP8 checkpoint (null for kNone).
  nlohmann::json to_json() const;
};

// The engine's quantization setting applied to a model's config.json: "" or "none" loads the weights as
// stored; "fp8" makes the decoder linears FP8 (nothing changes for an FP8 checkpoint). Returns whether the
// weights must be quantised as they load: unquantised weights of what is now an FP8 model (a BF16
// checkpoint under "fp8", or dummy weights, which are BF16). Throws InvalidInput naming any other setting.
bool apply_quantization_setting(const std::string& setting, bool dummy_weights, WeightQuantization& quantization);

}  // namespace nanovllm
