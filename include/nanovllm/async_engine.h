#pragma once
// The engine for a server: one thread owns the engine and steps it while there is work; any thread submits
// requests, aborts them, and reads each request's deltas as the steps make them (vLLM V1's engine core loop).
//
// Outputs come on a per-request RequestStream that the consumer pulls: next() blocks, try_next() polls. A pull
// stream fits C++ best because the consumer's work (formatting, writing to a socket) stays on the consumer's
// thread: a slow or throwing consumer never stalls the engine's step loop or the other requests, and there is
// no re-entrancy (a callback that calls abort or submit from inside a step). An event loop that cannot block
// passes an `on_ready` wake-up to submit(): it runs on the engine thread whenever the stream has something new,
// and should only schedule a try_next() on the event loop (it must be quick and must not throw).
//
// Errors: a bad request (InvalidInput) ends its own stream with `error` set; the others run on. An exception
// from a step is fatal: every unfinished stream ends with `error` set, the engine turns unhealthy, and further
// submits throw EngineError with that message. The destructor aborts what is in flight (streams end with
// finish_reason "abort") and joins the thread.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nanovllm/config.h"
#include "nanovllm/engine_stats.h"
#include "nanovllm/outputs.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm {

class LLMEngine;
class Tokenizer;

// One request's deltas in order; the last one has finished == true. Thread-safe; shared by the engine (which
// fills it) and the consumer, so it outlives either.
class RequestStream {
 public:
  explicit RequestStream(int64_t request_id) : request_id_(request_id) {}
  int64_t request_id() const { return request_id_; }  // for AsyncEngine::abort

  // The next delta, waiting for it; std::nullopt once the finished delta was taken.
  std::optional<RequestDelta> next();
  // The next delta if one is there (std::nullopt also after the end: see done()).
  std::optional<RequestDelta> try_next();
  // Waits for the end; the deltas not yet taken, summed.
  RequestOutput result();
  // The finished delta was taken.
  bool done() const;

 private:
  friend class AsyncEngine;
  // The engine's side: appends a delta and wakes the consumer.
  void push(RequestDelta delta);
  std::optional<RequestDelta> pop_locked();

  const int64_t request_id_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<RequestDelta> deltas_;
  bool done_ = false;
};

class AsyncEngine {
 public:
  using Wakeup = std::function<void()>;

  explicit AsyncEngine(EngineConfig config);
  // Runs an engine built by the caller (a wrapper of LLMEngine's step, or a test's).
  explicit AsyncEngine(std::unique_ptr<LLMEngine> engine);
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Queues a request (validated and tokenized on the engine thread). Throws EngineError when the engine has
  // failed or is shutting down.
  std::shared_ptr<RequestStream> submit(Prompt prompt, SamplingParams params, Wakeup on_ready = {});
  // Ends a request with finish_reason "abort" and frees its KV blocks; any thread, any time; a no-op for a
  // request that has finished.
  void abort(int64_t request_id);

  // What a server needs to prepare requests on its own threads. Set up before the engine thread starts and never
  // changed, so any thread may use them: the settings as the engine resolved them (max_model_len capped by the
  // model's), the tokenizer (null without tokenizer files; encode and decode are thread-safe) and the chat
  // template (LLMEngine::apply_chat_template).
  const EngineConfig& config() const;
  const Tokenizer* tokenizer() const;
  std::string apply_chat_template(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  bool add_generation_prompt, const nlohmann::ordered_json& extra) const;

  bool healthy() const;
  std::string error() const;  // the fatal error; empty while healthy
  EngineStats stats() const;  // as of the last step

 private:
  struct Submission {
    Prompt prompt;
    SamplingParams params;
    std::shared_ptr<RequestStream> stream;
    Wakeup on_ready;
  };
  struct Live {  // a request the engine holds, by the engine's id (the stream has this class's)
    std::shared_ptr<RequestStream> stream;
    Wakeup on_ready;
  };

  void run();
  void admit(Submission& s);
  void deliver(std::vector<RequestDelta> deltas);
  void publish_stats();
  // Ends every unfinished stream with `error` (fatal) or as aborted (shutdown).
  void end_all(const std::string& error);

  std::unique_ptr<LLMEngine> engine_;
  // Shared with the submitting threads, under mutex_:
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Submission> submissions_;
  std::vector<int64_t> aborts_;
  bool stopping_ = false;
  std::string error_;
  EngineStats stats_;
  int64_t next_id_ = 0;
  // The engine thread's own:
  std::unordered_map<int64_t, Live> live_;             // by the engine's request id
  std::unordered_map<int64_t, int64_t> engine_id_of_;  // this class's id -> the engine's
  std::thread thread_;                                 // last: starts after everything it uses
};

}  // namespace nanovllm
