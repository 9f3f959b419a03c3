#pragma once
// The bodies of POST /v1/completions and /v1/chat/completions, checked field by field: a field the server does
// not know, or one that asks for what the engine lacks (n > 1, penalties, logit_bias...), is a 400 naming it,
// never silently ignored. Sampling fields a request leaves out come from the server's defaults.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/outputs.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm::server {

// What both endpoints share.
struct GenerationRequest {
  std::string model;
  SamplingParams params;          // max_tokens is settled later (it depends on the prompt's length)
  std::optional<int> max_tokens;  // as the request gave it
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

struct CompletionRequest : GenerationRequest {
  std::vector<Prompt> prompts;  // a string, a list of strings, token ids or a list of those: one choice each
  bool echo = false;
  std::optional<int> logprobs;  // the completions form: k top logprobs per token
};

struct ChatRequest : GenerationRequest {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;   // null or a non-empty array
  bool auto_tool_choice = false;  // tools given with tool_choice "auto" (explicit or by default)
  bool add_generation_prompt = true;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  bool logprobs = false;                                                      // the chat form: a flag plus top_logprobs
  int top_logprobs = 0;
};

// SamplingParams' own checks as a 400 (the message names the field).
void validate_sampling(const SamplingParams& params);

// Both throw ApiError 400 naming the field at fault.
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body, const SamplingParams& defaults);
ChatRequest parse_chat_request(const nlohmann::ordered_json& body, const SamplingParams& defaults);

}  // namespace nanovllm::server
