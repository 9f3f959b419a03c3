#pragma once
// Token logprobs in each endpoint's OpenAI form: the completions form (parallel lists tokens / token_logprobs /
// top_logprobs / text_offset) and the chat form (content: [{token, logprob, bytes, top_logprobs}]).
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/outputs.h"

namespace nanovllm {
class Tokenizer;
}

namespace nanovllm::server {

// The completions form, built a few tokens at a time (a stream's chunks): text_offset runs on across calls.
class CompletionLogprobs {
 public:
  explicit CompletionLogprobs(const Tokenizer& tokenizer, size_t first_offset = 0)
      : tokenizer_(tokenizer), offset_(first_offset) {}
  // `positions` are the engine's (chosen token first, then the top k). Appends to `into` (an object; the lists
  // are made when missing).
  void append(const std::vector<PositionLogprobs>& positions, nlohmann::json& into);
  // The echoed prompt's: its first token has no logprob (null).
  void append_prompt(const std::vector<int32_t>& prompt_ids, const std::vector<PositionLogprobs>& positions,
                     nlohmann::json& into);

 private:
  void add(int32_t token, const PositionLogprobs* position, nlohmann::json& into);

  const Tokenizer& tokenizer_;
  size_t offset_;
};

// The chat form of `positions`, `top` alternatives each: the "content" list.
nlohmann::json chat_logprobs(const Tokenizer& tokenizer, const std::vector<PositionLogprobs>& positions, int top);

}  // namespace nanovllm::server
