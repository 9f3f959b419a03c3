// Not a test: the skinny-linear GEMV against cuBLASLt at Qwen3-0.6B's (or -8B's) projection shapes and token
// counts around kGemvMaxTokens, next to the weight-streaming floor (W bytes / measured read bandwidth); with
// `fp8`, the GEMV on block-scaled FP8 codes of the same shapes beside it, against the FP8 floor. With `fold`, each
// projection's GEMV also as the decode step calls it with the norms folded in (GemvArgs: qkv and gate_up scaled by
// the input's rms, gate_up with its SiLU where the GEMV fuses it; o_proj and down adding the residual), beside
// the same call without the fold, for bf16 weights (and with `fp8` for FP8 codes too).
// As in bench_cuda_ops, each measurement captures 20 calls into a CUDA graph and reports the median of 15
// replays / 20; the calls rotate over enough weight copies to exceed L2, so W comes from device memory.
//
// The GEMV column is gemv.cu's kernel (launch_gemv_rounds) whatever the weight; with `streamed`, the streamed kernel
// (gemv_streamed.h) on the same calls beside it (launch_gemv takes it for large weights at one or two tokens).
// With `skinny`, instead: the skinny GEMM (gemm_skinny.h) against cuBLASLt at 17 to 256 rows (`sweep`: also the
// fastest configuration; `all`: every one).
//
//   bench_gemv [0.6b|8b] [fp8] [fold] [streamed] [skinny [sweep [all]]]   (one line per op, T and path; the last column
//   is GEMV speed-up)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_streamed.h"
#include "backend/cuda/programmatic_launch.h"
#include "tests/cuda/ops/bench_support.h"

namespace nanovllm {
namespace {

using test::graph_time_us;

struct Shape {
  const char* name;
  int n, k;
  DType out;
};

const std::vector<Shape> kQwen3_0_6b = {{"qkv", 4096, 1024, DType::BF16},
                                        {"o_proj", 1024, 2048, DType::BF16},
                                        {"gate_up", 6144, 1024, DType::BF16},
                                        {"down", 1024, 3072, DType::BF16},
                                        {"lm_head", 151936, 1024, DType::F32}};
const std::vector<Shape> kQwen3_8b = {{"qkv", 6144, 4096, DType::BF16},
                                      {"o_proj", 4096, 4096, DType::BF16},
                                      {"gate_up", 24576, 4096, DType::BF16},
                                      {"down", 4096, 12288, DType::BF16},
                                      {"lm_head", 151936, 4096, DType::F32}};

// The projection's GEMV as the decode step launches it, with (fold) or without the norms folded in; false where
// the GEMV does not take that call.
bool step_call(const Shape& s, cuda::GemvArgs& a, bool fold, cuda::GemvNormSum* sums, __nv_bfloat16* residual,
               const __nv_bfloat16* norm_weight) {
  const std::string name = s.name;
  if (name == "gate_up") {
    a.swiglu = true;
    a.n = s.n / 2;
    if (!cuda::gemv_supports(a)) {
      a.swiglu = false;
      a.n = s.n;
    }
  }
  if (!fold) return cuda::gemv_supports(a);
  if (name == "qkv" || name == "gate_up") {
    a.norm.input_sum_squares = sums;
    a.norm.eps = 1e-6f;
  } else if (name == "o_proj" || name == "down") {
    a.norm.residual = residual;
    a.norm.norm_weight = norm_weight;
    a.norm.sum_squares = sums;
    a.norm.stale_sums = sums + cuda::kGemvMaxTokens;  // as the step: another norm's sums zeroed
    a.norm.stale_sum_count = cuda::kGemvMaxTokens;
  } else {
    return false;
  }
  return cuda::gemv_supports(a);
}

// The projection's GEMV plain and folded, one line each for bf16 weights and (when there are any) FP8 codes, on the
// same fold operands.
template <class Fill>
void print_fold_timings(CudaBackend& gpu, const Shape& s, int t, const cuda::GemvArgs& args,
                        const std::vector<const __nv_bfloat16*>& weights,
                        const std::vector<std::pair<const uint8_t*, const float*>>& fp8_weights, Fill& fill, int sms,
                        std::vector<Buffer>& keep) {
  // Sums of squares of 1 a row (the previous call's, and the stale ones after them), a residual and norm weights:
  // the fold's operands.
  std::vector<cuda::GemvNormSum> host_sums(2 * cuda::kGemvMaxTokens);
  for (cuda::GemvNormSum& sum : host_sums) sum.whole = 1;
  keep.push_back(gpu.allocate(host_sums.size() * sizeof(cuda::GemvNormSum)));
  auto* sums = static_cast<cuda::GemvNormSum*>(keep.back().data());
  gpu.upload(host_sums.data(), sums, keep.back().bytes());
  __nv_bfloat16* residual = fill(int64_t{t} * s.n);
  const __nv_bfloat16* norm_weight = fill(s.n);
  for (const bool fp8 : {false, true}) {
    if (fp8 && fp8_weights.empty()) continue;
    cuda::GemvArgs calls[2] = {args, args};
    if (fp8) {
      for (cuda::GemvArgs& a : calls) {
        a.weight = nullptr;
        a.weight_fp8 = fp8_weights[0].first;
        a.block_scale = fp8_weights[0].second;
      }
    }
    for (const bool folded : {false, true})
      if (!step_call(s, calls[folded], folded, sums, residual, norm_weight)) return;  // e.g. the lm_head
    double us[2] = {0.0, 0.0};
    for (const bool folded : {false, true}) {
      us[folded] = graph_time_us(gpu, [&](int i) {
        cuda::GemvArgs a = calls[folded];
        if (fp8) {
          a.weight_fp8 = fp8_weights[i % fp8_weights.size()].first;
          a.block_scale = fp8_weights[i % fp8_weights.size()].second;
        } else {
          a.weight = weights[i % weights.size()];
        }
        cuda::launch_gemv(a, sms, gpu.stream());
      });
    }
    std::printf("%-8s %4d  fold %s: %.2f -> %.2f us (%+.2f)\n", s.name, t, fp8 ? "FP8" : "bf16", us[0], us[1],
                us[1] - us[0]);
  }
}

// Copies of a shape's bf16 weight, enough of them to exceed L2 when the calls rotate over them.
std::vector<const __nv_bfloat16*> rotated_weights(const Shape& s, const std::function<__nv_bfloat16*(int64_t)>& fill) {
  const double w_bytes = 2.0 * s.n * s.k;
  const int copies = static_cast<int>(std::max<int64_t>(1, static_cast<int64_t>((160ll << 20) / w_bytes) + 1));
  std::vector<const __nv_bfloat16*> weights;
  for (int i = 0; i < copies; ++i) weights.push_back(fill(int64_t{s.n} * s.k));
  return weights;
}

// The skinny GEMM against cuBLASLt, bf16 projections (not the lm_head) at 17 to 256 rows: the configuration
// launch_skinny_gemm chooses, and with `sweep` the fastest of every tile shape and split (each printed with `all`).
void run_skinny(CudaBackend& gpu, cuda::Gemm& gemm, const std::vector<Shape>& shapes, double read_gbs, int sms,
                const std::function<__nv_bfloat16*(int64_t)>& fill, std::vector<Buffer>& keep, bool sweep, bool all) {
  std::printf("%-8s %4s  %10s %10s %9s  %10s %9s  %8s  %s\n", "op", "T", "floor us", "skinny us", "GB/s", "cublas us",
              "GB/s", "speedup", "rows x tokens / splits (best of sweep)");
  const cuda::SkinnyGemmWorkspace workspace = gemm.skinny_workspace();
  for (const Shape& s : shapes) {
    if (s.out != DType::BF16) continue;
    const double w_bytes = 2.0 * s.n * s.k;
    const std::vector<const __nv_bfloat16*> weights = rotated_weights(s, fill);
    const int copies = static_cast<int>(weights.size());
    for (int t : {17, 32, 48, 64, 96, 128, 192, 256}) {
      const __nv_bfloat16* x = fill(int64_t{t} * s.k);
      keep.push_back(gpu.allocate(static_cast<size_t>(t) * s.n * 2));
      auto* out = static_cast<__nv_bfloat16*>(keep.back().data());
      const double bytes = w_bytes + 2.0 * t * s.k + 2.0 * t * s.n;
      const double floor_us = bytes / (read_gbs * 1e3);
      const double cublas_us = graph_time_us(gpu, [&](int i) {
        gemm.run_cublaslt(x, weights[i % copies], nullptr, out, s.out, t, s.n, s.k, gpu.stream());
      });
      const cuda::SkinnyGemmArgs args{x, weights[0], nullptr, out, t, s.n, s.k};
      auto time_config = [&](const cuda::SkinnyGemmConfig& c) {
        return graph_time_us(gpu, [&](int i) {
          cuda::SkinnyGemmArgs a = args;
          a.weight = weights[i % copies];
          cuda::launch_skinny_gemm(a, workspace, c, gpu.stream());
        });
      };
      auto describe = [&](const cuda::SkinnyGemmConfig& c) {
        return std::to_string(c.tile_rows) + "x" + std::to_string(c.token_tile) + "/" +
               std::to_string(cuda::skinny_gemm_splits(args, workspace, c));
      };
      const cuda::SkinnyGemmConfig chosen = cuda::skinny_gemm_config(args, sms);
      const double chosen_us = time_config(chosen);
      std::string note = describe(chosen);
      if (sweep) {
        double best_us = 1e30;
        cuda::SkinnyGemmConfig best;
        for (int rows : {64, 128}) {
          for (int tokens : {32, 64, 128}) {
            if (tokens >= 2 * std::max(t, 32)) continue;
            for (int splits : {1, 2, 3, 4, 6, 8}) {
              const cuda::SkinnyGemmConfig c{rows, tokens, splits};
              if (cuda::skinny_gemm_splits(args, workspace, c) != splits) continue;
              const double us = time_config(c);
              if (all) std::printf("    %-8s %4d  %-12s %8.2f us\n", s.name, t, describe(c).c_str(), us);
              if (us < best_us) best_us = us, best = c;
            }
          }
        }
        note += "  (" + describe(best) + ": " + std::to_string(best_us).substr(0, 5) + " us)";
      }
      std::printf("%-8s %4d  %10.2f %10.2f %9.0f  %10.2f %9.0f  %7.2fx  %s\n", s.name, t, floor_us, chosen_us,
                  bytes / (chosen_us * 1e3), cublas_us, bytes / (cublas_us * 1e3), cublas_us / chosen_us, note.c_str());
    }
  }
}

void run(const std::vector<Shape>& shapes, bool fp8, bool fold, bool streamed, bool skinny, bool sweep, bool all) {
  CudaBackend gpu(0);
  const double read_gbs = gpu.measure_read_bandwidth_gbs(size_t{2} << 30);
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  std::printf("%s, %d SMs, read bandwidth %.0f GB/s (floors use it); kGemvMaxTokens = %d\n", gpu.device_name().c_str(),
              sms, read_gbs, cuda::kGemvMaxTokens);
  Buffer workspace = gpu.allocate(32u << 20);
  cuda::Gemm gemm(workspace.data(), workspace.bytes());
  std::vector<Buffer> keep;
  auto fill = [&](int64_t elements) {
    keep.push_back(gpu.allocate(static_cast<size_t>(elements) * 2));
    std::vector<float> host(static_cast<size_t>(elements));
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = 0.01f * static_cast<float>(static_cast<int>(i * 2654435761u % 201) - 100);
    gpu.upload_converted(host.data(), DType::F32, keep.back().data(), elements);
    return static_cast<__nv_bfloat16*>(keep.back().data());
  };

  // FP8 codes (never the NaN codes 0x7f / 0xff) and their block scales, as the loader quantises them.
  auto fill_fp8 = [&](int n, int k) {
    keep.push_back(gpu.allocate(static_cast<size_t>(n) * k));
    std::vector<uint8_t> codes(static_cast<size_t>(n) * k);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 2654435761u % 0x7f) | ((i & 1) << 7);
    gpu.upload(codes.data(), keep.back().data(), codes.size());
    const auto* fp8_codes = static_cast<const uint8_t*>(keep.back().data());
    const size_t scales = static_cast<size_t>((n + 127) / 128) * ((k + 127) / 128);
    keep.push_back(gpu.allocate(scales * sizeof(float)));
    const std::vector<float> host_scales(scales, 1.f / 448);
    gpu.upload(host_scales.data(), keep.back().data(), scales * sizeof(float));
    return std::pair{fp8_codes, static_cast<const float*>(keep.back().data())};
  };
  // With programmatic dependent launch (NANOVLLM_PDL=0 turns it off) each GEMV of the graph starts streaming
  // its weights while the previous one finishes: an upper bound on what the decode step, where the previous
  // kernel is a norm or attention, gets from it.
  std::printf("programmatic dependent launch: %s\n", cuda::programmatic_launch_enabled() ? "on" : "off");
  if (skinny) return run_skinny(gpu, gemm, shapes, read_gbs, sms, fill, keep, sweep, all);
  std::printf("%-8s %4s  %10s %10s %9s  %10s %9s  %8s\n", "op", "T", "floor us", "gemv us", "GB/s", "cublas us", "GB/s",
              "speedup");
  for (const Shape& s : shapes) {
    const double w_bytes = 2.0 * s.n * s.k;
    const std::vector<const __nv_bfloat16*> weights = rotated_weights(s, fill);
    const int copies = static_cast<int>(weights.size());
    const int fp8_copies = fp8 ? std::max(1, copies / 2) * 2 : 0;  // as many bytes as the bf16 copies
    std::vector<std::pair<const uint8_t*, const float*>> fp8_weights;
    for (int i = 0; i < fp8_copies; ++i) fp8_weights.push_back(fill_fp8(s.n, s.k));
    for (int t : {1, 4, 8, 16, 17, 24, 32, 64}) {
      if (s.n > 100000 && t > 8) continue;
      const __nv_bfloat16* x = fill(int64_t{t} * s.k);
      keep.push_back(gpu.allocate(static_cast<size_t>(t) * s.n * dtype_size(s.out)));
      void* out = keep.back().data();
      const double bytes = w_bytes + 2.0 * t * s.k + static_cast<double>(t) * s.n * dtype_size(s.out);
      const double floor_us = bytes / (read_gbs * 1e3);
      const double cublas_us = graph_time_us(gpu, [&](int i) {
        gemm.run_cublaslt(x, weights[i % copies], nullptr, out, s.out, t, s.n, s.k, gpu.stream());
      });
      const cuda::GemvArgs args{x, weights[0], nullptr, out, s.out, t, s.n, s.k};
      if (fp8 && t <= cuda::kGemvMaxTokensAnyWeight) {
        const double fp8_bytes = bytes - w_bytes / 2;
        const double gemv_us = graph_time_us(gpu, [&](int i) {
          cuda::GemvArgs a = args;
          a.weight = nullptr;
          a.weight_fp8 = fp8_weights[i % fp8_copies].first;
          a.block_scale = fp8_weights[i % fp8_copies].second;
          cuda::launch_gemv(a, sms, gpu.stream());
        });
        std::printf("%-8s %4d  %10.2f %10.2f %9.0f  (FP8 codes)\n", s.name, t, fp8_bytes / (read_gbs * 1e3), gemv_us,
                    fp8_bytes / (gemv_us * 1e3));
      }
      if (streamed && cuda::gemv_streamed_supports(args)) {
        const double streamed_us = graph_time_us(gpu, [&](int i) {
          cuda::GemvArgs a = args;
          a.weight = weights[i % copies];
          cuda::launch_gemv_streamed(a, sms, gpu.stream());
        });
        std::printf("%-8s %4d  %10.2f %10.2f %9.0f  (streamed)\n", s.name, t, floor_us, streamed_us,
                    bytes / (streamed_us * 1e3));
      }
      if (fold && t <= cuda::kGemvMaxTokens) print_fold_timings(gpu, s, t, args, weights, fp8_weights, fill, sms, keep);
      if (cuda::gemv_supports(args)) {
        const double gemv_us = graph_time_us(gpu, [&](int i) {
          cuda::GemvArgs a = args;
          a.weight = weights[i % copies];
          cuda::launch_gemv_rounds(a, sms, gpu.stream());
        });
        std::printf("%-8s %4d  %10.2f %10.2f %9.0f  %10.2f %9.0f  %7.2fx\n", s.name, t, floor_us, gemv_us,
                    bytes / (gemv_us * 1e3), cublas_us, bytes / (cublas_us * 1e3), cublas_us / gemv_us);
      } else {
        std::printf("%-8s %4d  %10.2f %10s %9s  %10.2f %9.0f  (not on the GEMV)\n", s.name, t, floor_us, "-", "-",
                    cublas_us, bytes / (cublas_us * 1e3));
      }
    }
  }
}

}  // namespace
}  // namespace nanovllm

int main(int argc, char** argv) {
  try {
    bool fp8 = false, fold = false, streamed = false, skinny = false, sweep = false, all = false;
    const std::vector<nanovllm::Shape>* shapes = &nanovllm::kQwen3_0_6b;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "fp8") {
        fp8 = true;
      } else if (arg == "fold") {
        fold = true;
      } else if (arg == "streamed") {
        streamed = true;
      } else if (arg == "skinny") {
        skinny = true;
      } else if (arg == "sweep") {
        sweep = true;
      } else if (arg == "all") {
        all = true;
      } else if (arg == "8b") {
        shapes = &nanovllm::kQwen3_8b;
      } else if (arg != "0.6b") {
        std::fprintf(
            stderr,
            "bench_gemv: unknown argument '%s' (expected 0.6b, 8b, fp8, fold, streamed, skinny, sweep or all)\n",
            argv[i]);
        return 2;
      }
    }
    nanovllm::run(*shapes, fp8, fold, streamed, skinny, sweep, all);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemv: %s\n", e.what());
    return 1;
  }
  return 0;
}
