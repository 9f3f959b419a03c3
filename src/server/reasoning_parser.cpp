#include "server/reasoning_parser.h"

#include "server/held_back_text.h"

namespace nanovllm::server {

namespace {
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

std::string_view without_leading_newlines(std::string_view text) {
  const size_t start = text.find_first_not_of('\n');
  return start == std::string_view::npos ? std::string_view{} : text.substr(start);
}

std::string_view without_trailing_newlines(std::string_view text) {
  return text.substr(0, before_trailing(text, text.size(), "\n"));
}
}  // namespace

ReasoningSplit split_qwen3_reasoning(std::string_view text) {
  if (!text.starts_with(kThinkOpen)) return {.reasoning = {}, .content = std::string(text)};
  const std::string_view body = text.substr(kThinkOpen.size());
  const size_t close = body.find(kThinkClose);
  if (close == std::string_view::npos)
    return {.reasoning = std::string(without_trailing_newlines(without_leading_newlines(body))), .content = {}};
  return {.reasoning = std::string(without_trailing_newlines(without_leading_newlines(body.substr(0, close)))),
          .content = std::string(without_leading_newlines(body.substr(close + kThinkClose.size())))};
}

ReasoningSplit Qwen3ReasoningStream::feed(std::string_view delta) {
  held_ += delta;
  ReasoningSplit out;
  if (phase_ == Phase::kOpening) {
    if (held_.size() < kThinkOpen.size() && kThinkOpen.starts_with(held_)) return out;  // may still be <think>
    if (!held_.starts_with(kThinkOpen)) {
      phase_ = Phase::kContent;
    } else {
      held_.erase(0, kThinkOpen.size());
      phase_ = Phase::kReasoning;
    }
  }
  if (phase_ == Phase::kReasoning) {
    if (!reasoning_started_) held_ = without_leading_newlines(held_);
    if (const size_t close = held_.find(kThinkClose); close != std::string::npos) {
      out.reasoning = without_trailing_newlines(std::string_view(held_).substr(0, close));
      held_.erase(0, close + kThinkClose.size());
      phase_ = Phase::kContentStart;
    } else {
      // Keep what may become </think>, and the newlines before it, which would then be framing.
      const size_t end = before_trailing(held_, held_.size() - partial_tag_length(held_, kThinkClose), "\n");
      out.reasoning = held_.substr(0, end);
      held_.erase(0, end);
    }
    reasoning_started_ = reasoning_started_ || !out.reasoning.empty();
  }
  if (phase_ == Phase::kContentStart) {
    held_ = without_leading_newlines(held_);
    if (!held_.empty()) phase_ = Phase::kContent;
  }
  if (phase_ == Phase::kContent) out.content = std::move(held_), held_.clear();
  return out;
}

ReasoningSplit Qwen3ReasoningStream::flush() {
  ReasoningSplit out;
  // The output ended: an unclosed <think> is all reasoning, a cut-short "<thi" is content.
  if (phase_ == Phase::kReasoning) out.reasoning = without_trailing_newlines(held_);
  else if (phase_ != Phase::kContentStart) out.content = held_;
  held_.clear();
  return out;
}

}  // namespace nanovllm::server
