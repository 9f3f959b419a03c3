#include "server/completion_generation.h"

namespace nanovllm::server {

namespace {
// The prompt's logprobs (when echoed) and then the new tokens', appended to `into`; `from` is one delta or the
// whole output.
template <class Output>
void append_logprobs(CompletionLogprobs& builder, bool echo, const std::vector<int32_t>& prompt_ids, const Output& from,
                     nlohmann::json& into) {
  if (echo && from.prompt_logprobs) builder.append_prompt(prompt_ids, *from.prompt_logprobs, into);
  if (from.logprobs) builder.append(*from.logprobs, into);
}
}  // namespace

CompletionGeneration::CompletionGeneration(GenerationContext context, bool stream, bool include_usage, bool echo,
                                           std::optional<int> logprobs)
    : Generation(std::move(context), stream, include_usage), echo_(echo), logprobs_(logprobs) {}

void CompletionGeneration::open_stream(std::string& /*events*/) {
  for (size_t i = 0; i < choices_.size(); ++i) streamed_logprobs_.emplace_back(context_.tokenizer);
  echoed_.assign(choices_.size(), false);
}

void CompletionGeneration::stream_delta(size_t index, const RequestDelta& delta, std::string& events) {
  const bool echo_now = echo_ && !echoed_[index];
  echoed_[index] = true;
  std::string text = (echo_now ? choices_[index].choice.prompt_text : std::string()) + delta.text;
  nlohmann::json logprobs = nullptr;
  if (logprobs_) append_logprobs(streamed_logprobs_[index], echo_, choices_[index].choice.prompt_ids, delta, logprobs);
  // A step whose tokens are all held back (a stop string may still form) says nothing, unless it carries logprobs.
  const bool has_logprobs = logprobs.is_object() && !logprobs["tokens"].empty();
  if (text.empty() && !has_logprobs && !delta.finished) return;
  nlohmann::json choice = {{"index", index},
                           {"text", std::move(text)},
                           {"logprobs", has_logprobs ? logprobs : nlohmann::json(nullptr)},
                           {"finish_reason", delta.finished ? nlohmann::json(delta.finish_reason) : nullptr},
                           {"stop_reason", nullptr}};
  nlohmann::json chunk = response_head("text_completion");
  chunk["choices"] = nlohmann::json::array({std::move(choice)});
  events += event(chunk);
}

nlohmann::json CompletionGeneration::whole_response() {
  nlohmann::json response = response_head("text_completion");
  nlohmann::json choices = nlohmann::json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceState& c = choices_[i];
    nlohmann::json logprobs = nullptr;
    if (logprobs_) {
      CompletionLogprobs builder(context_.tokenizer);
      logprobs = nlohmann::json::object();
      append_logprobs(builder, echo_, c.choice.prompt_ids, c.output, logprobs);
    }
    choices.push_back({{"index", i},
                       {"text", (echo_ ? c.choice.prompt_text : std::string()) + c.output.text},
                       {"logprobs", std::move(logprobs)},
                       {"finish_reason", c.output.finish_reason},
                       {"stop_reason", nullptr}});
  }
  response["choices"] = std::move(choices);
  response["usage"] = usage();
  return response;
}

}  // namespace nanovllm::server
