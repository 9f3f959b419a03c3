#include "server/chat_generation.h"

#include "server/logprobs_json.h"

namespace nanovllm::server {

ChatGeneration::ChatGeneration(GenerationContext context, bool stream, bool include_usage,
                               std::optional<int> top_logprobs)
    : Generation(std::move(context), stream, include_usage), top_logprobs_(top_logprobs) {}

nlohmann::json ChatGeneration::chunk(nlohmann::json delta, nlohmann::json logprobs,
                                     nlohmann::json finish_reason) const {
  nlohmann::json c = response_head("chat.completion.chunk");
  c["choices"] = nlohmann::json::array({{{"index", 0},
                                         {"delta", std::move(delta)},
                                         {"logprobs", std::move(logprobs)},
                                         {"finish_reason", std::move(finish_reason)}}});
  return c;
}

void ChatGeneration::open_stream(std::string& events) {
  events += event(chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
}

void ChatGeneration::stream_delta(size_t /*index*/, const RequestDelta& delta, std::string& events) {
  nlohmann::json logprobs = nullptr;
  if (top_logprobs_ && delta.logprobs && !delta.logprobs->empty())
    logprobs = {{"content", chat_logprobs(context_.tokenizer, *delta.logprobs, *top_logprobs_)}};
  if (delta.text.empty() && logprobs.is_null() && !delta.finished) return;  // held back: nothing to say yet
  nlohmann::json message = nlohmann::json::object();
  if (!delta.text.empty() || !logprobs.is_null()) message["content"] = delta.text;
  events += event(chunk(std::move(message), std::move(logprobs),
                        delta.finished ? nlohmann::json(delta.finish_reason) : nlohmann::json(nullptr)));
}

nlohmann::json ChatGeneration::whole_response() {
  const RequestOutput& out = choices_.front().output;
  nlohmann::json logprobs = nullptr;
  if (top_logprobs_)
    logprobs = {{"content", out.logprobs ? chat_logprobs(context_.tokenizer, *out.logprobs, *top_logprobs_)
                                         : nlohmann::json::array()}};
  nlohmann::json response = response_head("chat.completion");
  response["choices"] = nlohmann::json::array({{{"index", 0},
                                                {"message", {{"role", "assistant"}, {"content", out.text}}},
                                                {"logprobs", std::move(logprobs)},
                                                {"finish_reason", out.finish_reason}}});
  response["usage"] = usage();
  return response;
}

}  // namespace nanovllm::server
