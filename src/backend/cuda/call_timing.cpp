#include "backend/cuda/call_timing.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "common/error.h"

namespace nanovllm::cuda {
namespace {

// Owns a CUDA event (timing enabled).
class Event {
 public:
  Event() { NANOVLLM_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

float median_call_ms(const std::function<void()>& call, cudaStream_t stream, int warmup, int timed) {
  if (timed < 1) throw EngineError("median_call_ms: needs at least one timed call");
  const Event start, stop;
  for (int i = 0; i < warmup; ++i) call();
  std::vector<float> ms;
  for (int i = 0; i < timed; ++i) {
    NANOVLLM_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    call();
    NANOVLLM_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    NANOVLLM_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float t = 0.0f;
    NANOVLLM_CUDA_CHECK(cudaEventElapsedTime(&t, start.get(), stop.get()));
    ms.push_back(t);
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace nanovllm::cuda
