// SamplingParams::validate(): the ranges vLLM accepts.
#include <cmath>
#include <string>

#include "engine/validation_message.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm {

void SamplingParams::validate() const {
  const auto check_k = [](const char* name, const std::optional<int>& k) {
    if (k && (*k < 0 || *k > kMaxLogprobs))
      throw_invalid_setting(name, ("in [0, " + std::to_string(kMaxLogprobs) + "]").c_str(), *k);
  };
  // Comparisons are written so that NaN fails them.
  if (!(std::isfinite(temperature) && temperature >= 0.0f)) {
    throw_invalid_setting("temperature", ">= 0 and finite", temperature);
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) throw_invalid_setting("top_p", "in (0, 1]", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) throw_invalid_setting("min_p", "in [0, 1]", min_p);
  if (top_k < -1) throw_invalid_setting("top_k", "-1 (off) or >= 0 (0 is off too)", top_k);
  if (max_tokens < 1) throw_invalid_setting("max_tokens", ">= 1", max_tokens);
  if (min_tokens < 0) throw_invalid_setting("min_tokens", ">= 0", min_tokens);
  if (min_tokens > max_tokens) {
    throw_invalid_setting("min_tokens", ("<= max_tokens (" + std::to_string(max_tokens) + ")").c_str(), min_tokens);
  }
  check_k("logprobs", logprobs);
  check_k("prompt_logprobs", prompt_logprobs);
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) throw_invalid_setting(("stop[" + std::to_string(i) + "]").c_str(), "non-empty", stop[i]);
  }
}

}  // namespace nanovllm
