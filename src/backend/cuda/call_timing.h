#pragma once
// Timing of single calls with CUDA events, for the backend's measurements at load (read bandwidth, the faster of
// two kernels for a shape). Synchronises the stream; not for use while it is captured.
#include <cuda_runtime.h>

#include <functional>

namespace nanovllm::cuda {

// Median over `timed` calls of `call` on `stream`, each timed alone, after `warmup` untimed calls; milliseconds.
float median_call_ms(const std::function<void()>& call, cudaStream_t stream, int warmup, int timed);

}  // namespace nanovllm::cuda
