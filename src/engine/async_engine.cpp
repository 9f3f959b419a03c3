#include "nanovllm/async_engine.h"

#include <utility>

#include "common/error.h"
#include "engine/llm_engine.h"

namespace nanovllm {

std::optional<RequestDelta> RequestStream::pop_locked() {
  if (deltas_.empty()) return std::nullopt;
  RequestDelta d = std::move(deltas_.front());
  deltas_.pop_front();
  if (d.finished) done_ = true;
  return d;
}

std::optional<RequestDelta> RequestStream::next() {
  std::unique_lock lock(mutex_);
  arrived_.wait(lock, [&] { return !deltas_.empty() || done_; });
  return pop_locked();
}

std::optional<RequestDelta> RequestStream::try_next() {
  std::lock_guard lock(mutex_);
  return pop_locked();
}

RequestOutput RequestStream::result() {
  RequestOutput out;
  while (std::optional<RequestDelta> d = next()) out.append(std::move(*d));
  return out;
}

bool RequestStream::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void RequestStream::push(RequestDelta delta) {
  {
    std::lock_guard lock(mutex_);
    delta.request_id = request_id_;  // the consumer's id, not the engine's
    deltas_.push_back(std::move(delta));
  }
  arrived_.notify_all();
}

namespace {
// One finished delta that carries an error (or, with none, an abort).
RequestDelta ending(int64_t id, const std::string& error) {
  RequestDelta d;
  d.request_id = id;
  d.finished = true;
  d.error = error;
  if (error.empty()) d.finish_reason = "abort";
  d.time = EngineClock::now();
  return d;
}

void wake(const AsyncEngine::Wakeup& on_ready) {
  if (!on_ready) return;
  try {
    on_ready();
  } catch (...) {  // a consumer's failing wake-up is the consumer's problem; the engine and the others run on
  }
}
}  // namespace

AsyncEngine::AsyncEngine(EngineConfig config) : AsyncEngine(std::make_unique<LLMEngine>(std::move(config))) {}

AsyncEngine::AsyncEngine(std::unique_ptr<LLMEngine> engine) : engine_(std::move(engine)) {
  stats_ = engine_->stats();
  thread_ = std::thread([this] { run(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

std::shared_ptr<RequestStream> AsyncEngine::submit(Prompt prompt, SamplingParams params, Wakeup on_ready) {
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard lock(mutex_);
    if (!error_.empty()) throw EngineError("the engine has failed: " + error_);
    if (stopping_) throw EngineError("the engine is shutting down");
    stream = std::make_shared<RequestStream>(next_id_++);
    submissions_.push_back({std::move(prompt), std::move(params), stream, std::move(on_ready)});
  }
  wake_.notify_one();
  return stream;
}

void AsyncEngine::abort(int64_t request_id) {
  {
    std::lock_guard lock(mutex_);
    aborts_.push_back(request_id);
  }
  wake_.notify_one();
}

const EngineConfig& AsyncEngine::config() const { return engine_->config(); }

const Tokenizer* AsyncEngine::tokenizer() const { return engine_->tokenizer(); }

std::string AsyncEngine::apply_chat_template(const nlohmann::ordered_json& messages,
                                             const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                             const nlohmann::ordered_json& extra) const {
  return engine_->apply_chat_template(messages, tools, add_generation_prompt, extra);
}

bool AsyncEngine::healthy() const {
  std::lock_guard lock(mutex_);
  return error_.empty();
}

std::string AsyncEngine::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void AsyncEngine::run() {
  bool has_work = false;
  try {
    for (;;) {
      std::vector<Submission> submissions;
      std::vector<int64_t> aborts;
      {
        std::unique_lock lock(mutex_);
        // Sleeps (no CPU) until there is something to do.
        wake_.wait(lock, [&] { return stopping_ || has_work || !submissions_.empty() || !aborts_.empty(); });
        if (stopping_) break;
        submissions.swap(submissions_);
        aborts.swap(aborts_);
      }
      // Submissions first: an abort may name a request submitted just before it.
      for (Submission& s : submissions) admit(s);
      for (int64_t id : aborts)
        if (auto it = engine_id_of_.find(id); it != engine_id_of_.end()) engine_->abort(it->second);
      std::vector<RequestDelta> deltas;
      if (!engine_->is_finished()) deltas = engine_->step_deltas();
      publish_stats();  // before the deltas: a consumer that saw its request end sees the blocks freed
      deliver(std::move(deltas));
      has_work = !engine_->is_finished();
    }
  } catch (const std::exception& e) {
    end_all(e.what());
    return;
  }
  // Shutdown: abort what is in flight and let the engine report it (aborted requests need no model step).
  try {
    for (const auto& [engine_id, live] : live_) engine_->abort(engine_id);
    while (!engine_->is_finished()) deliver(engine_->step_deltas());
    publish_stats();
  } catch (const std::exception&) {  // the streams still end, as aborted, below
  }
  end_all("");
}

void AsyncEngine::admit(Submission& s) {
  try {
    const int64_t engine_id = engine_->add_request(s.prompt, std::move(s.params));
    live_.emplace(engine_id, Live{s.stream, std::move(s.on_ready)});
    engine_id_of_.emplace(s.stream->request_id(), engine_id);
  } catch (const InvalidInput& e) {  // this request alone fails
    s.stream->push(ending(s.stream->request_id(), e.what()));
    wake(s.on_ready);
  }
}

void AsyncEngine::deliver(std::vector<RequestDelta> deltas) {
  for (RequestDelta& d : deltas) {
    auto it = live_.find(d.request_id);
    const bool finished = d.finished;
    it->second.stream->push(std::move(d));
    wake(it->second.on_ready);
    if (!finished) continue;
    engine_id_of_.erase(it->second.stream->request_id());
    live_.erase(it);
  }
}

void AsyncEngine::publish_stats() {
  const EngineStats s = engine_->stats();
  std::lock_guard lock(mutex_);
  stats_ = s;
}

void AsyncEngine::end_all(const std::string& error) {
  std::vector<Submission> queued;
  {
    std::lock_guard lock(mutex_);
    if (!error.empty()) error_ = error;  // from here on submit() throws, so nothing more is queued
    stopping_ = true;
    queued.swap(submissions_);
  }
  for (auto& [engine_id, live] : live_) {
    live.stream->push(ending(live.stream->request_id(), error));
    wake(live.on_ready);
  }
  live_.clear();
  engine_id_of_.clear();
  for (Submission& s : queued) {
    s.stream->push(ending(s.stream->request_id(), error));
    wake(s.on_ready);
  }
}

}  // namespace nanovllm
