#pragma once
// Per-request sampling controls, named as vLLM names them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nanovllm {

struct SamplingParams {
  static constexpr int kMaxLogprobs = 20;  // the largest k of logprobs / prompt_logprobs (vLLM's default cap)

  float temperature = 1.0f;      // 0 = greedy
  int top_k = -1;                // -1 (or 0) = all tokens
  float top_p = 1.0f;            // in (0, 1]
  float min_p = 0.0f;            // in [0, 1]
  std::optional<uint64_t> seed;  // reproducible sampling for this request
  int max_tokens = 16;           // vLLM's default
  int min_tokens = 0;            // EOS and stop tokens are ignored before this many
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;       // stop strings, cut from the text (needs a tokenizer)
  std::optional<int> logprobs;         // k in [0, kMaxLogprobs]: logprob of each output token plus the top k
  std::optional<int> prompt_logprobs;  // k in [0, kMaxLogprobs]: the same for each prompt token (the first is null)
  bool skip_special_tokens = true;

  // Throws InvalidInput naming the first bad field.
  void validate() const;
};

}  // namespace nanovllm
