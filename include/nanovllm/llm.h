#pragma once
// The public C++ API: LLM::generate(prompts, SamplingParams), as in nano-vLLM and vLLM.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nanovllm/config.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm {

class LLMEngine;

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

class LLM {
 public:
  explicit LLM(EngineConfig config);
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  // Runs all prompts to completion in one continuous batch; outputs in input order. A request that is
  // invalid gets its error field set and the others still run.
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params);
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts, const SamplingParams& params);
  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts, const SamplingParams& params);

  LLMEngine& engine() { return *engine_; }

 private:
  std::unique_ptr<LLMEngine> engine_;
};

}  // namespace nanovllm
