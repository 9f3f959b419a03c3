#include "server/generation.h"

#include <algorithm>

namespace nanovllm::server {

Generation::Generation(GenerationContext context, bool stream, bool include_usage)
    : context_(std::move(context)), stream_(stream), include_usage_(include_usage) {}

Generation::~Generation() {
  // The client left: the engine's last delta of each unfinished request will find no one to take it, so the
  // abort is counted here.
  for (const ChoiceState& c : choices_) {
    if (c.output.finished) continue;
    context_.engine.abort(c.choice.stream->request_id());
    context_.metrics.record_abandoned();
  }
}

void Generation::add_choice(Choice choice) { choices_.push_back(ChoiceState{std::move(choice), {}, {}, {}, false}); }

void Generation::abort() {
  for (const ChoiceState& c : choices_)
    if (!c.output.finished) context_.engine.abort(c.choice.stream->request_id());
}

std::string Generation::event(const nlohmann::json& chunk) { return "data: " + dump_json(chunk) + "\n\n"; }

nlohmann::json Generation::response_head(const char* object) const {
  return {{"id", context_.id}, {"object", object}, {"created", context_.created}, {"model", context_.model}};
}

nlohmann::json Generation::usage() const {
  size_t prompt = 0, completion = 0;
  for (const ChoiceState& c : choices_) {
    prompt += c.choice.prompt_ids.size();
    completion += c.output.token_ids.size();
  }
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

HttpReply Generation::failure(const std::string& error) const {
  // A request the engine refused is the client's fault; a failed engine is the server's.
  if (!context_.engine.healthy()) return error_reply(ApiError(503, "the engine has failed: " + error));
  return error_reply(ApiError(400, error));
}

Generation::Progress Generation::poll() {
  Progress progress;
  if (ended_) return progress;
  std::optional<std::string> error;
  for (ChoiceState& c : choices_) {
    while (std::optional<RequestDelta> d = c.choice.stream->try_next()) {
      context_.metrics.record(*d, c.last_token_time);
      c.seen = true;
      if (!d->error.empty() && !error) error = d->error;
      c.pending.push_back(std::move(*d));
    }
  }
  if (error && !started_) {
    abort();  // the other choices of a request that failed
    ended_ = progress.end = true;
    progress.reply = failure(*error);
    return progress;
  }
  const bool all_seen = std::all_of(choices_.begin(), choices_.end(), [](const ChoiceState& c) { return c.seen; });
  if (stream_ && !started_ && all_seen) {
    started_ = true;
    open_stream(progress.events);
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    ChoiceState& c = choices_[i];
    if (stream_ && !started_) break;
    for (RequestDelta& d : c.pending) {
      if (stream_ && d.error.empty()) stream_delta(i, d, progress.events);
      c.output.append(std::move(d));
    }
    c.pending.clear();
  }
  if (error) {  // the engine failed while the stream ran: say so in the stream (as vLLM does), then end it
    abort();
    progress.events += event(ApiError(503, "the engine has failed: " + *error).to_json());
    progress.events += "data: [DONE]\n\n";
    ended_ = progress.end = true;
    return progress;
  }
  const bool all_finished =
      std::all_of(choices_.begin(), choices_.end(), [](const ChoiceState& c) { return c.output.finished; });
  if (!all_finished) return progress;
  ended_ = progress.end = true;
  if (stream_) {
    if (include_usage_) {
      nlohmann::json chunk = response_head(stream_object());
      chunk["choices"] = nlohmann::json::array();
      chunk["usage"] = usage();
      progress.events += event(chunk);
    }
    progress.events += "data: [DONE]\n\n";
  } else {
    progress.reply = json_reply(whole_response());
  }
  return progress;
}

}  // namespace nanovllm::server
