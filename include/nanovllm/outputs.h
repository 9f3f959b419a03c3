#pragma once
// What a request is made of and what comes back for it: the prompt, what each engine step adds to a request
// (RequestDelta), and the whole output with the logprobs it asked for (RequestOutput, the deltas summed).
#include <chrono>
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

using EngineClock = std::chrono::steady_clock;

// When a request went through the engine's stages; what a server needs for TTFT, inter-token latency and queue
// time. Unset points have not happened yet.
struct RequestMetrics {
  EngineClock::time_point arrival_time;                         // add_request
  std::optional<EngineClock::time_point> first_scheduled_time;  // its first prompt chunk ran
  std::optional<EngineClock::time_point> first_token_time;
  std::optional<EngineClock::time_point> last_token_time;
  std::optional<EngineClock::time_point> finished_time;
  int num_cached_prompt_tokens = 0;  // prompt tokens whose KV came from the prefix cache (first allocation)

  // Seconds from arrival to the first scheduled step (queue) and to the first token (TTFT); 0 while unset.
  double queue_seconds() const { return first_scheduled_time ? seconds(arrival_time, *first_scheduled_time) : 0.0; }
  double first_token_seconds() const { return first_token_time ? seconds(arrival_time, *first_token_time) : 0.0; }

 private:
  static double seconds(EngineClock::time_point from, EngineClock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  }
};

// What one engine step added to one request. Concatenating a request's deltas in order gives its RequestOutput
// (see RequestOutput::append). `text` only ever holds complete UTF-8 characters, and text that a stop string
// could still turn into the stop (the last longest-stop-minus-one bytes) is held back until it can no longer.
struct RequestDelta {
  int64_t request_id = -1;
  std::vector<int32_t> prompt_token_ids;                  // in the request's first delta only
  std::vector<int32_t> token_ids;                         // new tokens (all tokens of one step arrive at `time`)
  std::string text;                                       // new stable text
  std::optional<std::vector<PositionLogprobs>> logprobs;  // of the new tokens, when the request asked for them
  // Once, in the delta that completes the prompt (or the last one when the request ends before that).
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs;
  bool finished = false;
  std::string finish_reason;     // "stop" | "length" | "abort" in the finished delta
  std::string error;             // the request was rejected or the engine failed; the delta is then the last one
  EngineClock::time_point time;  // when the step that made it ended
  RequestMetrics metrics;        // as of this step
};

struct RequestOutput {
  int64_t request_id = -1;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> token_ids;  // generated tokens
  std::string text;                // detokenized output (empty without a tokenizer)
  std::string finish_reason;       // "stop" | "length" | "abort"; empty while running
  bool finished = false;
  std::optional<std::vector<PositionLogprobs>> logprobs;
  // First entry is empty: the first prompt token has no logprob (JSON null).
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs;
  std::string error;  // set when the request was rejected; nothing else is then
  RequestMetrics metrics;

  // Adds a step's delta of this request.
  void append(RequestDelta&& delta) {
    request_id = delta.request_id;
    if (!delta.prompt_token_ids.empty()) prompt_token_ids = std::move(delta.prompt_token_ids);
    token_ids.insert(token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
    text += delta.text;
    if (delta.logprobs) {
      if (!logprobs) logprobs.emplace();
      for (PositionLogprobs& p : *delta.logprobs) logprobs->push_back(std::move(p));
    }
    if (delta.prompt_logprobs) prompt_logprobs = std::move(delta.prompt_logprobs);
    finished = delta.finished;
    finish_reason = std::move(delta.finish_reason);
    if (!delta.error.empty()) error = std::move(delta.error);
    metrics = delta.metrics;
  }
};

}  // namespace nanovllm
