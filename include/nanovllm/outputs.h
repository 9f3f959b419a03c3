#pragma once
// What a request is made of and what comes back for it: the prompt, and the request's output with the
// logprobs it asked for.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nanovllm {

// One prompt: text, or token ids (token ids win when both are set).
struct Prompt {
  std::string text;
  std::vector<int32_t> token_ids;
  static Prompt from_text(std::string t) { return Prompt{std::move(t), {}}; }
  static Prompt from_tokens(std::vector<int32_t> ids) { return Prompt{{}, std::move(ids)}; }
};

// (token id, logprob) pairs of one position: the chosen (or prompt) token first, then the top k.
using PositionLogprobs = std::vector<std::pair<int32_t, float>>;

struct RequestOutput {
  int64_t request_id = -1;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> token_ids;     // generated tokens
  std::string text;                   // detokenized output (empty without a tokenizer)
  std::string finish_reason;          // "stop" | "length" | "abort"; empty while running
  bool finished = false;
  std::optional<std::vector<PositionLogprobs>> logprobs;
  // First entry is empty: the first prompt token has no logprob (JSON null).
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs;
  std::string error;                  // set when the request was rejected; nothing else is then
};

}  // namespace nanovllm
