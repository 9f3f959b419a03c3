// Not a test: how far cuBLASLt's first heuristic pick is from the fastest algorithm it offers, at Qwen3-8B's
// decode shapes on one GPU and per rank at tensor parallelism 2. For each (op, M) it times every algorithm of
// the heuristic's list (up to 32) as the engine runs a linear (bf16 in, bf16 or fp32 out, weight rows K-major),
// each captured 20 times into a CUDA graph, over rotated weight copies that exceed L2.
//
//   bench_gemm_algos      (one line per op and M: floor, pick #0, the best pick and its rank in the list)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "tests/cuda/ops/bench_support.h"

namespace nanovllm {
namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: cuBLASLt status %d\n", what, static_cast<int>(s));
    std::exit(1);
  }
}

struct Shape {
  const char* name;
  int n, k;
  bool f32_out;
};

void run() {
  CudaBackend gpu(0);
  const double read_gbs = gpu.measure_read_bandwidth_gbs(size_t{2} << 30);
  std::printf("%s, read bandwidth %.0f GB/s (floors use it)\n", gpu.device_name().c_str(), read_gbs);
  cublasLtHandle_t handle;
  check(cublasLtCreate(&handle), "create");
  const size_t workspace_bytes = 32u << 20;
  Buffer workspace = gpu.allocate(workspace_bytes);

  const Shape shapes[] = {
      {"qkv tp1", 6144, 4096, false},      {"o tp1", 4096, 4096, false},      {"gate_up tp1", 24576, 4096, false},
      {"down tp1", 4096, 12288, false},    {"lm_head tp1", 151936, 4096, true}, {"qkv tp2", 3072, 4096, false},
      {"o tp2", 4096, 2048, false},        {"gate_up tp2", 12288, 4096, false}, {"down tp2", 4096, 6144, false},
      {"lm_head tp2", 75968, 4096, true},
  };
  const int ms[] = {16, 64, 128, 256};
  Buffer x = gpu.allocate(size_t{512} * 12288 * 2);
  Buffer out = gpu.allocate(size_t{256} * 151936 * 4);
  {
    std::vector<float> host(size_t{512} * 12288);
    for (size_t i = 0; i < host.size(); ++i) host[i] = 0.01f * static_cast<float>(static_cast<int>(i * 2654435761u % 201) - 100);
    gpu.upload_converted(host.data(), DType::F32, x.data(), static_cast<int64_t>(host.size()));
  }
  std::printf("%-12s %4s %9s %9s %9s %6s %5s\n", "op", "M", "floor us", "pick0 us", "best us", "gain", "rank");
  for (const Shape& s : shapes) {
    const size_t w_bytes = size_t{2} * s.n * s.k;
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t{256} << 20) / w_bytes + 1));
    std::vector<Buffer> weights;
    for (int c = 0; c < copies; ++c) {
      weights.push_back(gpu.allocate(w_bytes));
      cudaMemsetAsync(weights.back().data(), 0x3c, w_bytes, gpu.stream());  // bf16 ~0.01: finite values
    }
    for (int m : ms) {
      cublasLtMatmulDesc_t desc;
      check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
      const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n);
      cublasLtMatrixLayout_t a, b, c;
      check(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, s.k, s.n, s.k), "a");
      check(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, s.k, m, s.k), "b");
      check(cublasLtMatrixLayoutCreate(&c, s.f32_out ? CUDA_R_32F : CUDA_R_16BF, s.n, m, s.n), "c");
      cublasLtMatmulPreference_t pref;
      cublasLtMatmulPreferenceCreate(&pref);
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                           sizeof workspace_bytes);
      std::vector<cublasLtMatmulHeuristicResult_t> results(32);
      int found = 0;
      check(cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, pref, 32, results.data(), &found), "heuristic");
      const float alpha = 1.0f, beta = 0.0f;
      double pick0 = 0, best = 1e30;
      int best_rank = -1;
      for (int r = 0; r < found; ++r) {
        const cublasLtMatmulAlgo_t algo = results[r].algo;
        bool ok = true;
        const double us = test::graph_time_us(gpu, [&](int i) {
          const cublasStatus_t st =
              cublasLtMatmul(handle, desc, &alpha, weights[i % copies].data(), a, x.data(), b, &beta, out.data(), c,
                             out.data(), c, &algo, workspace.data(), workspace_bytes, gpu.stream());
          if (st != CUBLAS_STATUS_SUCCESS) ok = false;
        });
        if (!ok) continue;
        if (r == 0) pick0 = us;
        if (us < best) best = us, best_rank = r;
      }
      const double floor_us = (static_cast<double>(w_bytes) + 2.0 * m * s.k) / (read_gbs * 1e3);
      std::printf("%-12s %4d %9.1f %9.1f %9.1f %5.1f%% %2d/%d\n", s.name, m, floor_us, pick0, best,
                  100.0 * (pick0 - best) / pick0, best_rank, found);
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(a);
      cublasLtMatrixLayoutDestroy(b);
      cublasLtMatrixLayoutDestroy(c);
      cublasLtMatmulDescDestroy(desc);
    }
  }
  cublasLtDestroy(handle);
}

}  // namespace
}  // namespace nanovllm

int main() {
  nanovllm::run();
  return 0;
}
