#pragma once
// One completion or chat request in flight: the engine streams of its choices, turned into what the client gets.
// The connection calls poll() whenever the engine signals news; poll() never blocks. Non-streamed, the result
// is one reply once every choice has finished. Streamed, it is server-sent events ("data: {chunk}\n\n" ...
// "data: [DONE]\n\n"), which start once every choice's first delta is in, so that a request the engine rejects
// still gets a plain 400. Destroying an unfinished Generation aborts its requests (the client left), which
// frees their KV blocks at the engine's next step.
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/async_engine.h"
#include "server/http_reply.h"
#include "server/in_flight_limit.h"
#include "server/metrics.h"

namespace nanovllm {
class Tokenizer;
}

namespace nanovllm::server {

struct GenerationContext {
  AsyncEngine& engine;
  const Tokenizer& tokenizer;
  ServerMetrics& metrics;
  std::string id;            // cmpl-... or chatcmpl-...
  int64_t created = 0;       // Unix seconds
  std::string model;         // as served
  InFlightLimit::Slot slot;  // the request's place under the queue bound, held while it runs
};

class Generation {
 public:
  struct Choice {
    std::shared_ptr<RequestStream> stream;
    std::vector<int32_t> prompt_ids;
    std::string prompt_text;
  };
  struct Progress {
    std::optional<HttpReply> reply;  // the whole reply (non-streamed, or a stream that failed before it began)
    std::string events;              // streamed: the next bytes of the event stream
    bool end = false;                // nothing more will come
  };

  Generation(GenerationContext context, bool stream, bool include_usage);
  virtual ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Adds a choice (before the first poll); the choices' indexes are their order.
  void add_choice(Choice choice);
  Progress poll();
  // Ends the unfinished requests in the engine (finish_reason "abort").
  void abort();
  bool streaming() const { return stream_; }

 protected:
  struct ChoiceState {
    Choice choice;
    RequestOutput output;  // the deltas so far, summed
    std::deque<RequestDelta> pending;
    std::optional<EngineClock::time_point> last_token_time;
    bool seen = false;  // its first delta came
  };

  // Streamed: called once, before the first delta; may add events that go before its (chat's role chunk).
  virtual void open_stream(std::string& events) { (void)events; }
  // Streamed: the events of choice `index`'s next delta (its state's output does not hold it yet).
  virtual void stream_delta(size_t index, const RequestDelta& delta, std::string& events) = 0;
  // Non-streamed: the response body once every choice has finished.
  virtual nlohmann::json whole_response() = 0;
  // The "object" of stream chunks: "text_completion" or "chat.completion.chunk".
  virtual const char* stream_object() const = 0;

  // "data: {chunk}\n\n"
  static std::string event(const nlohmann::json& chunk);
  // {"id", "object", "created", "model"} of a response or chunk.
  nlohmann::json response_head(const char* object) const;
  // Tokens of all choices: {"prompt_tokens", "completion_tokens", "total_tokens"}.
  nlohmann::json usage() const;

  const GenerationContext context_;
  std::vector<ChoiceState> choices_;

 private:
  // The reply for a request that failed with `error` (the engine's message).
  HttpReply failure(const std::string& error) const;

  const bool stream_;
  const bool include_usage_;
  bool started_ = false;
  bool ended_ = false;
};

}  // namespace nanovllm::server
