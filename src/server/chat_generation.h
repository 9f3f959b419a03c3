#pragma once
// POST /v1/chat/completions in flight: one choice, the assistant's message (streamed: a role chunk first, then
// content deltas), logprobs in the chat form.
#include <optional>

#include "server/generation.h"

namespace nanovllm::server {

class ChatGeneration : public Generation {
 public:
  // `top_logprobs`: set when the request asked for logprobs, with how many alternatives per token.
  ChatGeneration(GenerationContext context, bool stream, bool include_usage, std::optional<int> top_logprobs);

 private:
  void open_stream(std::string& events) override;
  void stream_delta(size_t index, const RequestDelta& delta, std::string& events) override;
  nlohmann::json whole_response() override;
  const char* stream_object() const override { return "chat.completion.chunk"; }

  nlohmann::json chunk(nlohmann::json delta, nlohmann::json logprobs, nlohmann::json finish_reason) const;

  const std::optional<int> top_logprobs_;
};

}  // namespace nanovllm::server
