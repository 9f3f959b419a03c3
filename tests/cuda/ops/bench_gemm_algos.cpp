// Not a test: how far cuBLASLt's first heuristic pick (the one Gemm runs) is from the fastest algorithm the
// heuristic lists, at Qwen3-8B's decode shapes on one GPU and per rank at tensor parallelism 2 (or Qwen3-0.6B's),
// for token counts that take cuBLASLt (above kGemvMaxTokens). Each algorithm of Gemm::listed_algorithms (up to
// 32) runs through Gemm::run_listed, 20 calls captured in a CUDA graph over rotated weight copies that exceed L2,
// next to the memory floor (weights, input and output bytes / measured read bandwidth). The first eight listed
// algorithms are also run with 2, 4, 8 and 16 splits of K under each reduction scheme cuBLASLt accepts (the
// heuristic rarely lists split-K).
//
//   bench_gemm_algos [8b|0.6b]  (one line per op and M: floor, pick #0, the best listed pick and its rank,
//                                the best split-K variant, its split count and reduction scheme)
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm.h"
#include "tests/cuda/ops/bench_support.h"

namespace nanovllm {
namespace {

struct Shape {
  const char* name;
  int n, k;
  DType out;
};

// The fastest split-K variant (2-16 splits, each reduction scheme) of the first eight listed algorithms; a
// variant cuBLASLt refuses is skipped. us is -1 when none ran.
struct SplitK {
  double us = -1;
  int splits = 0;
  const char* scheme = "-";
};

SplitK best_split_k(const std::vector<cublasLtMatmulAlgo_t>& algos,
                    const std::function<double(const cublasLtMatmulAlgo_t&)>& time_us) {
  const std::pair<uint32_t, const char*> schemes[] = {{CUBLASLT_REDUCTION_SCHEME_INPLACE, "inplace"},
                                                      {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, "compute"},
                                                      {CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE, "output"}};
  SplitK best;
  int tried = 0;
  for (const cublasLtMatmulAlgo_t& listed : algos) {
    if (tried == 8) break;
    for (int splits : {2, 4, 8, 16}) {
      for (const auto& [scheme, scheme_name] : schemes) {
        cublasLtMatmulAlgo_t algo = listed;
        if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                 sizeof(scheme)) != CUBLAS_STATUS_SUCCESS)
          continue;
        const double us = time_us(algo);
        if (us > 0 && (best.us < 0 || us < best.us)) best = SplitK{us, splits, scheme_name};
      }
    }
    ++tried;
  }
  return best;
}

void run(bool small_model) {
  CudaBackend gpu(0);
  const double read_gbs = gpu.measure_read_bandwidth_gbs(size_t{2} << 30);
  std::printf("%s, read bandwidth %.0f GB/s (floors use it)\n", gpu.device_name().c_str(), read_gbs);
  Buffer workspace = gpu.allocate(32u << 20);
  cuda::Gemm gemm(workspace.data(), workspace.bytes());

  const std::vector<Shape> shapes_0_6b = {
      {"qkv", 4096, 1024, DType::BF16},  {"o", 1024, 2048, DType::BF16},        {"gate_up", 6144, 1024, DType::BF16},
      {"down", 1024, 3072, DType::BF16}, {"lm_head", 151936, 1024, DType::F32},
  };
  const std::vector<Shape> shapes_8b = {
      {"qkv tp1", 6144, 4096, DType::BF16},      {"o tp1", 4096, 4096, DType::BF16},
      {"gate_up tp1", 24576, 4096, DType::BF16}, {"down tp1", 4096, 12288, DType::BF16},
      {"lm_head tp1", 151936, 4096, DType::F32}, {"qkv tp2", 3072, 4096, DType::BF16},
      {"o tp2", 4096, 2048, DType::BF16},        {"gate_up tp2", 12288, 4096, DType::BF16},
      {"down tp2", 4096, 6144, DType::BF16},     {"lm_head tp2", 75968, 4096, DType::F32},
  };
  const std::vector<Shape>& shapes = small_model ? shapes_0_6b : shapes_8b;
  const int ms[] = {32, 64, 128, 256};
  Buffer x = gpu.allocate(size_t{256} * 12288 * 2);
  Buffer out = gpu.allocate(size_t{256} * 151936 * 4);
  {
    std::vector<float> host(size_t{256} * 12288);
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = 0.01f * static_cast<float>(static_cast<int>(i * 2654435761u % 201) - 100);
    gpu.upload_converted(host.data(), DType::F32, x.data(), static_cast<int64_t>(host.size()));
  }
  std::printf("%-12s %4s %9s %9s %9s %6s %5s %9s %6s %8s\n", "op", "M", "floor us", "pick0 us", "best us", "gain",
              "rank", "splitK us", "splits", "scheme");
  for (const Shape& s : shapes) {
    const size_t w_bytes = size_t{2} * s.n * s.k;
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t{256} << 20) / w_bytes + 1));
    std::vector<Buffer> weights;
    for (int c = 0; c < copies; ++c) {
      weights.push_back(gpu.allocate(w_bytes));
      // bf16 0x3c3c (~0.0115): finite values, so no algorithm meets NaN or inf.
      std::vector<uint16_t> fill(w_bytes / 2, 0x3c3c);
      gpu.upload(fill.data(), weights.back().data(), w_bytes);
    }
    for (int m : ms) {
      const std::vector<cublasLtMatmulAlgo_t> algos = gemm.listed_algorithms(m, s.n, s.k, s.out, 32);
      double pick0 = -1, best = -1;
      int best_rank = -1;
      // µs per call, or -1 when cuBLASLt refuses the algorithm for this shape.
      auto time_us = [&](const cublasLtMatmulAlgo_t& algo) {
        if (!gemm.run_listed(algo, static_cast<const __nv_bfloat16*>(x.data()),
                             static_cast<const __nv_bfloat16*>(weights[0].data()), out.data(), s.out, m, s.n, s.k,
                             gpu.stream()))
          return -1.0;
        return test::graph_time_us(gpu, [&](int i) {
          gemm.run_listed(algo, static_cast<const __nv_bfloat16*>(x.data()),
                          static_cast<const __nv_bfloat16*>(weights[i % copies].data()), out.data(), s.out, m, s.n, s.k,
                          gpu.stream());
        });
      };
      for (size_t r = 0; r < algos.size(); ++r) {
        const double us = time_us(algos[r]);
        if (us < 0) continue;  // refused for this shape: not timed
        if (r == 0) pick0 = us;
        if (best < 0 || us < best) best = us, best_rank = static_cast<int>(r);
      }
      const double bytes =
          static_cast<double>(w_bytes) + 2.0 * m * s.k + static_cast<double>(dtype_size(s.out)) * m * s.n;
      const double floor_us = bytes / (read_gbs * 1e3);
      if (pick0 < 0 || best < 0) {
        std::printf("%-12s %4d %9.1f %9s %9s %6s %5s  (pick #0 refused or nothing ran)\n", s.name, m, floor_us,
                    pick0 < 0 ? "n/a" : "", best < 0 ? "n/a" : "", "", "");
        continue;
      }
      const SplitK split = best_split_k(algos, time_us);
      std::printf("%-12s %4d %9.1f %9.1f %9.1f %5.1f%% %2d/%zu %9.1f %6d %8s\n", s.name, m, floor_us, pick0, best,
                  100.0 * (pick0 - best) / pick0, best_rank, algos.size(), split.us, split.splits, split.scheme);
    }
  }
}

}  // namespace
}  // namespace nanovllm

int main(int argc, char** argv) {
  try {
    nanovllm::run(argc > 1 && std::string(argv[1]) == "0.6b");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm_algos: %s\n", e.what());
    return 1;
  }
  return 0;
}
