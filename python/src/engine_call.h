#pragma once
// Exclusive use of an engine for one call. The engine runs one call at a time; a streaming call holds it across
// many Python-level steps and may end on another thread (a generator finalised elsewhere), which a mutex's
// owner rule forbids, so the claim is a flag that any thread may release.
#include <atomic>
#include <stdexcept>
#include <utility>

namespace nanovllm::python {

class EngineCall {
 public:
  // Claims the engine; throws std::runtime_error(busy_message) when another call holds it.
  EngineCall(std::atomic<bool>& busy, const char* busy_message) : busy_(&busy) {
    bool expected = false;
    if (!busy.compare_exchange_strong(expected, true)) {
      busy_ = nullptr;
      throw std::runtime_error(busy_message);
    }
  }
  ~EngineCall() {
    if (busy_ != nullptr) busy_->store(false);
  }
  EngineCall(EngineCall&& other) noexcept : busy_(std::exchange(other.busy_, nullptr)) {}
  EngineCall& operator=(EngineCall&&) = delete;
  EngineCall(const EngineCall&) = delete;
  EngineCall& operator=(const EngineCall&) = delete;

 private:
  std::atomic<bool>* busy_;
};

}  // namespace nanovllm::python
