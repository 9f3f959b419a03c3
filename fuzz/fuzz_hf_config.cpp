// Arbitrary bytes as a config.json through the depth-capped parser and ModelConfig::from_json, then the
// config back through to_json. Invariants checked, not only crashes: the only failure is InvalidInput, an
// accepted config round-trips, and its sizes multiply without overflow.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/error.h"
#include "common/json_parse.h"
#include "model/hf_config.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json config = nanovllm::parse_json(text, "config.json");
    const nanovllm::ModelConfig c = nanovllm::ModelConfig::from_json(config, nullptr);
    check(c.vocab_size > 0 && c.hidden_size > 0 && c.num_hidden_layers > 0 && c.head_dim > 0);
    check(c.q_size() > 0 && c.kv_size() > 0 && c.rms_norm_eps > 0.0f);
    const nanovllm::ModelConfig again = nanovllm::ModelConfig::from_json(c.to_json(), nullptr);
    check(again.vocab_size == c.vocab_size && again.q_size() == c.q_size() &&
          again.num_hidden_layers == c.num_hidden_layers && again.rms_norm_eps == c.rms_norm_eps);
  } catch (const nanovllm::InvalidInput&) {
  }
  return 0;
}
