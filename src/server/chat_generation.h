#pragma once
// POST /v1/chat/completions in flight: one choice, the assistant's message (streamed: a role chunk first, then
// deltas of content, reasoning_content and tool_calls as the output parsers find them), logprobs in the chat
// form. Once the answer called a tool, finish_reason is "tool_calls", as in vLLM.
#include <functional>
#include <optional>

#include "server/chat_output_parser.h"
#include "server/generation.h"

namespace nanovllm::server {

class ChatGeneration : public Generation {
 public:
  // `top_logprobs`: set when the request asked for logprobs, with how many alternatives per token.
  // `tool_call_id` makes a fresh "call_..." id.
  ChatGeneration(GenerationContext context, bool stream, bool include_usage, std::optional<int> top_logprobs,
                 ChatOutputParser parser, std::function<std::string()> tool_call_id);

 private:
  void open_stream(std::string& events) override;
  void stream_delta(size_t index, const RequestDelta& delta, std::string& events) override;
  nlohmann::json whole_response() override;
  const char* stream_object() const override { return "chat.completion.chunk"; }

  nlohmann::json chunk(nlohmann::json delta, nlohmann::json logprobs, nlohmann::json finish_reason) const;
  nlohmann::json tool_call(const ToolCall& call);

  const std::optional<int> top_logprobs_;
  ChatOutputParser parser_;
  const std::function<std::string()> tool_call_id_;
  int streamed_tool_calls_ = 0;
};

}  // namespace nanovllm::server
