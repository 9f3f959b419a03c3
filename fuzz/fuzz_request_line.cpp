// Arbitrary bytes as one line of `nanovllm generate --input` through the depth-capped parser and
// parse_request, and every error message through the checks a terminal needs. Invariants checked, not only
// crashes: the only failure is InvalidInput, its message is short and free of control characters, and an
// accepted request's sampling parameters validate.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/json_parse.h"
#include "request_json.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}

// An error message fit for one terminal line: bounded, and no byte below 0x20 (escaped by quoted_text).
void check_message(const std::string& message) {
  check(message.size() < 1024);
  for (const char c : message) check(static_cast<unsigned char>(c) >= 0x20);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  try {
    const auto json = nanovllm::parse_json<nlohmann::ordered_json>(line, "line 1");
    const nanovllm::cli::ParsedRequest request = nanovllm::cli::parse_request(json, nanovllm::SamplingParams{});
    request.params.validate();
    check(request.messages || !request.prompt.text.empty() || !request.prompt.token_ids.empty());
  } catch (const nanovllm::InvalidInput& e) {
    check_message(e.what());
  }
  return 0;
}
