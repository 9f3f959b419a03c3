#pragma once
// One request line of `nanovllm generate --input`: a JSON object with "prompt", "prompt_token_ids" or
// "messages", plus sampling fields by their vLLM names. Parsing errors name the field.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "nanovllm/llm.h"

namespace nanovllm::cli {

struct ParsedRequest {
  Prompt prompt;
  SamplingParams params;
  // Chat fields keep their key order (ordered_json): templates render tool definitions in the order given.
  std::optional<nlohmann::ordered_json> messages;
  nlohmann::ordered_json tools;  // null or array
  bool add_generation_prompt = true;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // e.g. {"enable_thinking": false}
};

// `defaults` supplies every sampling field the line leaves out. Throws InvalidInput.
ParsedRequest parse_request(const nlohmann::ordered_json& line, const SamplingParams& defaults);

// The output line: prompt_token_ids, token_ids, text, finish_reason, and logprobs / prompt_logprobs when
// asked (per position a list of [token_id, logprob] pairs; prompt_logprobs' first entry null), or "error".
nlohmann::json output_to_json(const RequestOutput& out);

}  // namespace nanovllm::cli
