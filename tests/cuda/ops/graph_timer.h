#pragma once
// Times a GPU call as the engine runs it: kCallsPerGraph calls captured into one CUDA graph, replayed 15 times,
// median per call. Shared by the op benchmarks (bench_cuda_ops, bench_gemv, bench_sampler).
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace nanovllm::test {

inline constexpr int kCallsPerGraph = 20;

// call(i) enqueues the i-th call (i may select a rotated input). Returns microseconds per call.
inline double graph_time_us(CudaBackend& gpu, const std::function<void(int)>& call) {
  call(0);  // eager first: lazy initialisation must not happen inside the capture
  gpu.synchronize();
  CudaGraph graph = gpu.capture([&] {
    for (int i = 0; i < kCallsPerGraph; ++i) call(i);
  });
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  gpu.replay(graph);
  std::vector<float> ms;
  for (int rep = 0; rep < 15; ++rep) {
    cudaEventRecord(start, gpu.stream());
    gpu.replay(graph);
    cudaEventRecord(stop, gpu.stream());
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2] * 1e3 / kCallsPerGraph;
}

}  // namespace nanovllm::test
