#pragma once
// What the op benchmarks (bench_cuda_ops, bench_gemv, bench_sampler, bench_gemm_algos) share: limits sized for
// Qwen3-0.6B and a timer that runs a call as the engine does (captured in a CUDA graph).
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace nanovllm::test {

inline constexpr int kCallsPerGraph = 20;

// Workspaces for Qwen3-0.6B shapes at batches up to 512 rows and 8192 tokens.
inline BackendLimits qwen3_0_6b_bench_limits(int vocab_size = 151936) {
  BackendLimits limits;
  limits.max_num_tokens = 8192;
  limits.max_num_seqs = 512;
  limits.max_model_len = 4096;
  limits.max_logits_rows = 512;
  limits.num_heads = 16;
  limits.num_kv_heads = 8;
  limits.head_dim = 128;
  limits.vocab_size = vocab_size;
  return limits;
}

// Times kCallsPerGraph calls captured into one CUDA graph, replayed 15 times; the median per call.
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
