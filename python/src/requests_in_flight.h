#pragma once
// The requests of one call that have not finished. When the call ends early (Ctrl-C, a callback that raised, an
// engine error, a stream left unfinished) they are aborted and their outputs drained, so the engine has nothing
// left over for the next call.
#include <cstdint>
#include <unordered_set>

#include "engine/llm_engine.h"

namespace nanovllm::python {

class RequestsInFlight {
 public:
  explicit RequestsInFlight(LLMEngine& engine) : engine_(engine) {}
  ~RequestsInFlight() { abort_all(); }
  RequestsInFlight(const RequestsInFlight&) = delete;
  RequestsInFlight& operator=(const RequestsInFlight&) = delete;

  void started(int64_t id) { ids_.insert(id); }
  void finished(int64_t id) { ids_.erase(id); }
  bool empty() const { return ids_.empty(); }

  // Aborts and drains what is left; never throws (the error that ended the call is the one to report).
  void abort_all() noexcept {
    if (ids_.empty()) return;
    try {
      for (int64_t id : ids_) engine_.abort(id);
      ids_.clear();
      while (!engine_.is_finished()) engine_.step();  // nothing runs: the aborted requests only report back
    } catch (...) {
    }
  }

 private:
  LLMEngine& engine_;
  std::unordered_set<int64_t> ids_;
};

}  // namespace nanovllm::python
