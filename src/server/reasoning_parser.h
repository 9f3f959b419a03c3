#pragma once
// Qwen3's thinking, split from the answer: output that starts with <think> holds its reasoning up to
// </think>, and the answer after it. Output that does not start with <think> (Qwen3 with
// enable_thinking=false) is all answer; a <think> never closed (the output was cut off) is all reasoning.
// Newlines are the tags' framing, not text: the reasoning loses its leading and trailing newlines, the
// answer after </think> its leading ones (Qwen3 writes "<think>\n...\n</think>\n\nanswer").
#include <string>
#include <string_view>

namespace nanovllm::server {

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

// The whole output at once.
ReasoningSplit split_qwen3_reasoning(std::string_view text);

// The same split over streamed output: the parts of each feed() and of the final flush(), concatenated,
// equal split_qwen3_reasoning() of the concatenated deltas however the text was cut. Text that may still
// become a tag or framing newlines is held back until it cannot.
class Qwen3ReasoningStream {
 public:
  // What is new in each part after `delta`; the tags never appear in either part.
  ReasoningSplit feed(std::string_view delta);
  // At the end of the output: whatever was held back.
  ReasoningSplit flush();

 private:
  enum class Phase { kOpening, kReasoning, kContentStart, kContent };
  Phase phase_ = Phase::kOpening;
  bool reasoning_started_ = false;  // whether any reasoning text was passed on (leading newlines are dropped)
  std::string held_;
};

}  // namespace nanovllm::server
