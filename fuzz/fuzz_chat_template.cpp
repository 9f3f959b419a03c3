// Arbitrary template sources through the Jinja parser and renderer. Errors must be InvalidInput; anything else
// (a crash, a sanitizer report, another exception type, a hang) is a finding.
#include <cstdint>
#include <string>

#include "common/error.h"
#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::ordered_json;
  static const ordered_json messages = ordered_json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi <think>x</think> there"},
    {"role": "assistant", "content": "<think>\nr\n</think>\n\nok", "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
    {"role": "tool", "content": "42"}])");
  static const ordered_json tools =
      ordered_json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  static const ordered_json extra = ordered_json::parse(R"({"enable_thinking": false, "eos_token": "<|im_end|>"})");
  try {
    const nanovllm::ChatTemplate chat(std::string(reinterpret_cast<const char*>(data), size));
    chat.render(messages, tools, true, extra);
  } catch (const nanovllm::InvalidInput&) {
  }
  return 0;
}
