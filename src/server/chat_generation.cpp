#include "server/chat_generation.h"

#include "server/logprobs_json.h"

namespace nanovllm::server {

ChatGeneration::ChatGeneration(GenerationContext context, bool stream, bool include_usage,
                               std::optional<int> top_logprobs, ChatOutputParser parser,
                               std::function<std::string()> tool_call_id)
    : Generation(std::move(context), stream, include_usage),
      top_logprobs_(top_logprobs),
      parser_(std::move(parser)),
      tool_call_id_(std::move(tool_call_id)) {}

nlohmann::json ChatGeneration::chunk(nlohmann::json delta, nlohmann::json logprobs,
                                     nlohmann::json finish_reason) const {
  nlohmann::json c = response_head("chat.completion.chunk");
  c["choices"] = nlohmann::json::array({{{"index", 0},
                                         {"delta", std::move(delta)},
                                         {"logprobs", std::move(logprobs)},
                                         {"finish_reason", std::move(finish_reason)}}});
  return c;
}

nlohmann::json ChatGeneration::tool_call(const ToolCall& call) {
  return {{"id", tool_call_id_()},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

void ChatGeneration::open_stream(std::string& events) {
  events += event(chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
}

void ChatGeneration::stream_delta(size_t /*index*/, const RequestDelta& delta, std::string& events) {
  ChatOutput piece = parser_.feed(delta.text);
  if (delta.finished) {
    ChatOutput rest = parser_.flush();
    piece.reasoning += rest.reasoning;
    piece.content += rest.content;
    for (ToolCall& call : rest.tool_calls) piece.tool_calls.push_back(std::move(call));
  }
  nlohmann::json logprobs = nullptr;
  if (top_logprobs_ && delta.logprobs && !delta.logprobs->empty())
    logprobs = {{"content", chat_logprobs(context_.tokenizer, *delta.logprobs, *top_logprobs_)}};
  nlohmann::json message = nlohmann::json::object();
  if (!piece.reasoning.empty()) message["reasoning_content"] = piece.reasoning;
  if (!piece.content.empty() || (message.empty() && piece.tool_calls.empty() && !logprobs.is_null()))
    message["content"] = piece.content;
  if (!piece.tool_calls.empty()) {
    nlohmann::json calls = nlohmann::json::array();
    for (const ToolCall& call : piece.tool_calls) {
      nlohmann::json c = tool_call(call);
      c["index"] = streamed_tool_calls_++;
      calls.push_back(std::move(c));
    }
    message["tool_calls"] = std::move(calls);
  }
  if (message.empty() && logprobs.is_null() && !delta.finished) return;  // held back: nothing to say yet
  nlohmann::json finish_reason = nullptr;
  if (delta.finished) finish_reason = streamed_tool_calls_ > 0 ? "tool_calls" : delta.finish_reason;
  events += event(chunk(std::move(message), std::move(logprobs), std::move(finish_reason)));
}

nlohmann::json ChatGeneration::whole_response() {
  const RequestOutput& out = choices_.front().output;
  const ChatOutput parsed = parser_.parse(out.text);
  nlohmann::json message = {{"role", "assistant"}, {"content", parsed.content}};
  if (parsed.content.empty() && !parsed.tool_calls.empty()) message["content"] = nullptr;  // as OpenAI's
  if (parser_.reasoning())
    message["reasoning_content"] =
        parsed.reasoning.empty() ? nlohmann::json(nullptr) : nlohmann::json(parsed.reasoning);
  if (parser_.tool_calls()) {
    message["tool_calls"] = nlohmann::json::array();
    for (const ToolCall& call : parsed.tool_calls) message["tool_calls"].push_back(tool_call(call));
  }
  nlohmann::json logprobs = nullptr;
  if (top_logprobs_)
    logprobs = {{"content", out.logprobs ? chat_logprobs(context_.tokenizer, *out.logprobs, *top_logprobs_)
                                         : nlohmann::json::array()}};
  nlohmann::json response = response_head("chat.completion");
  response["choices"] = nlohmann::json::array(
      {{{"index", 0},
        {"message", std::move(message)},
        {"logprobs", std::move(logprobs)},
        {"finish_reason", parsed.tool_calls.empty() ? out.finish_reason : std::string("tool_calls")}}});
  response["usage"] = usage();
  return response;
}

}  // namespace nanovllm::server
