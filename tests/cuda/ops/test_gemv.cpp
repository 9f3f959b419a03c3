// The skinny-linear GEMV (src/backend/cuda/gemv.cu) against the fp32 CPU backend on the same bf16 inputs:
// every token count the kernel has a code path for (T <= 8, 9..16 and 17..32, one or more row groups, 17..32 as two
// slices of 16 tokens where the grid is under one wave), N that are
// not multiples of the 8-row tile (1, 17), K with a partial last 32-wide step (8, 200), Qwen3-0.6B's shapes,
// with and without bias, bf16 and fp32 outputs. Outputs are NaN-poisoned first, so an unwritten element
// fails. Tolerances as in test_linear.cpp: 1e-2 relative L2 for bf16 out, 1e-4 for fp32 out.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_skinny.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_streamed.h"
#include "backend/cuda/sm90a_code.h"
#include "tests/cuda/ops/ops_test_support.h"
#include "tests/support/expect_invalid.h"

namespace nanovllm::test {
namespace {

struct GemvShape {
  int n, k;
};

std::string describe(int t, int n, int k, bool bias, DType out) {
  return "T=" + std::to_string(t) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + (bias ? " bias" : "") +
         (out == DType::F32 ? " f32-out" : " bf16-out");
}

class GemvTest : public CudaOpsTest {
 protected:
  // Why the streamed kernel (gemv_streamed.h) cannot run here, or empty.
  static std::string streamed_kernel_absent() {
    cuda::GemvArgs probe;
    probe.x = probe.weight = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{256});
    probe.out = reinterpret_cast<void*>(uintptr_t{256});
    probe.tokens = 1, probe.n = 8, probe.k = 8;
    if (!cuda::gemv_streamed_supports(probe)) return kNoSm90aBuild;
    return cuda::sm90a_code_runs_here() ? "" : "the streamed kernel is sm_90a code";
  }
  static constexpr const char* kNoSm90aBuild = "no sm_90a code in this build";
  int sm_count() {
    int device = 0, count = 0;
    EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
    return count;
  }

  // Runs the GEMV for every token count in `token_counts` with and without bias, into bf16 and fp32
  // outputs, against the CPU's fp32 linear of the same values; launched for `sms` SMs (0: this GPU's). streamed:
  // the streamed kernel (gemv_streamed.h) instead.
  void check_shape(int n, int k, const std::vector<int>& token_counts, int sms = 0, bool streamed = false) {
    if (sms == 0) sms = sm_count();
    const auto take = [&](int t) {  // gemv.h: wide weights up to kGemvMaxTokensAnyWeight rows
      return t <= cuda::kGemvMaxTokensAnyWeight || int64_t{n} * k < cuda::kGemvMaxWideWeight;
    };
    for_each_random_linear(n, k, token_counts, take,
                           [&](int t, bool bias, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                               const std::vector<float>& reference) {
                             for (DType out_dtype : {DType::BF16, DType::F32}) {
                               Tensor out = gpu_empty(out_dtype, {t, n});  // NaN-poisoned
                               const cuda::GemvArgs args{x, w, b, out.data, out_dtype, t, n, k};
                               const std::string what = describe(t, n, k, bias, out_dtype);
                               if (streamed) {
                                 EXPECT_TRUE(cuda::gemv_streamed_supports(args)) << what;
                                 if (HasFailure()) return false;
                                 cuda::launch_gemv_streamed(args, sms, gpu().stream());
                               } else {
                                 EXPECT_TRUE(cuda::gemv_supports(args)) << what;
                                 if (HasFailure()) return false;
                                 cuda::launch_gemv(args, sms, gpu().stream());
                               }
                               expect_rel_l2(read_gpu(out), reference, out_dtype == DType::F32 ? 1e-4 : 1e-2, what);
                               if (HasFailure()) return false;
                             }
                             return true;
                           });
  }
};

class GemvShapeTest : public GemvTest, public ::testing::WithParamInterface<GemvShape> {};

TEST_P(GemvShapeTest, MatchesCpu) {
  const GemvShape s = GetParam();
  check_shape(s.n, s.k, {1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32});
}

std::vector<GemvShape> gemv_shapes() {
  std::vector<GemvShape> shapes;
  for (int n : {1, 17, 1024, 4096, 6144}) {
    for (int k : {64, 1024, 2048, 3072}) shapes.push_back({n, k});
  }
  // K whose last 32-wide step is partial, and N that is neither a multiple of 8 nor of a 32-row CTA.
  for (int n : {1, 17, 1000}) {
    for (int k : {8, 200}) shapes.push_back({n, k});
  }
  shapes.push_back({4100, 1032});  // 4 row groups per warp (T >= 9), last CTA partly past N
  shapes.push_back({9000, 1032});  // 2 and 4 row groups in grids of 2+ waves: warps capped, CTAs share SMs
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvShapeTest, ::testing::ValuesIn(gemv_shapes()),
                         [](const ::testing::TestParamInfo<GemvShape>& info) {
                           return "N" + std::to_string(info.param.n) + "_K" + std::to_string(info.param.k);
                         });

// The streamed kernel: a partial last 1024-column stage (k 200, 1032, 4104), rows past n in the last group (n 1, 17,
// 1001), several groups a CTA and the stage ring wrapping many times (launched for 1, 3 and this GPU's SMs).
TEST_F(GemvTest, StreamedMatchesCpu) {
  if (const std::string why = streamed_kernel_absent(); !why.empty()) GTEST_SKIP() << why;
  const std::vector<int> tokens{1, 2, 7, 8, 9, 16};
  for (const int sms : {0, 3, 1}) {
    SCOPED_TRACE("launched for " + std::to_string(sms) + " SMs (0: all)");
    for (const GemvShape s : {GemvShape{1, 8}, GemvShape{17, 200}, GemvShape{1001, 1032}, GemvShape{4096, 1024},
                              GemvShape{2048, 4104}, GemvShape{300, 12288}})
      check_shape(s.n, s.k, sms == 1 && s.n > 1100 ? std::vector<int>{1, 9} : tokens, sms, true);
    if (HasFailure()) return;
  }
}

// A build with the streamed kernel (sm_90a code) refuses it on another GPU rather than launching the kernel's empty
// body there; launch_gemv never sends it (gemv_streamed_takes). Runs only off sm_90.
TEST_F(GemvTest, StreamedRefusedOffSm90) {
  const std::string why = streamed_kernel_absent();
  if (why.empty() || why == kNoSm90aBuild) GTEST_SKIP() << (why.empty() ? "an sm_90 device" : why);
  const int t = 1, n = 4096, k = 4096;
  const Tensor x = gpu_bf16(random_bf16_values(rng_, int64_t{t} * k), {t, k});
  const Tensor w = gpu_bf16(random_bf16_values(rng_, int64_t{n} * k, 0.1f), {n, k});
  Tensor out = gpu_empty(DType::BF16, {t, n});
  const cuda::GemvArgs a{x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), nullptr, out.data, DType::BF16, t, n, k};
  EXPECT_FALSE(cuda::gemv_streamed_takes(a));
  EXPECT_THROW(cuda::launch_gemv_streamed(a, sm_count(), gpu().stream()), InvalidInput);
}

// The streamed kernel's fused SiLU and folded norms against gemv.cu's kernel on the same operands, at token counts the
// engine routes to it (1, 2) and the rest it takes (up to 16), with several output groups a CTA (3 SMs) and one a CTA:
// the SiLU's outputs, the input-scaled products, and the residual call's new residual, its residual x weight and its
// sums of squares, all within rounding of the other kernel's (their sums are added in another order).
TEST_F(GemvTest, StreamedFoldsMatchRoundsKernel) {
  if (const std::string why = streamed_kernel_absent(); !why.empty()) GTEST_SKIP() << why;
  const int n = 512, k = 3080;  // a partial last stage; 64 output groups
  const Tensor w = gpu_bf16(random_bf16_values(rng_, int64_t{2} * n * k, 0.1f), {2 * n, k});
  const Tensor norm_weight = gpu_bf16(random_bf16_values(rng_, n), {n});
  for (const int sms : {0, 3}) {
    for (const int t : {1, 2, 5, 9, 16}) {
      const std::string where = "T=" + std::to_string(t) + " SMs=" + std::to_string(sms);
      const Tensor x = gpu_bf16(random_bf16_values(rng_, int64_t{t} * k), {t, k});
      const Tensor input_sums = input_norm_sums(t);
      const auto residual_values = random_bf16_values(rng_, int64_t{t} * n);
      // A call on both kernels, each into a fresh NaN-poisoned output: configure sets the call's own operands.
      const auto both = [&](const std::string& call, const auto& configure) {
        std::vector<float> outs[2];
        for (const bool streamed : {false, true}) {
          Tensor out = gpu_empty(DType::BF16, {t, n});
          cuda::GemvArgs a{x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), nullptr, out.data, DType::BF16, t, n, k};
          configure(a);
          ASSERT_TRUE(cuda::gemv_streamed_supports(a)) << where << ", " << call;
          if (streamed) {
            cuda::launch_gemv_streamed(a, sms == 0 ? sm_count() : sms, gpu().stream());
          } else {
            cuda::launch_gemv_rounds(a, sms == 0 ? sm_count() : sms, gpu().stream());
          }
          outs[streamed] = read_gpu(out);
        }
        expect_rel_l2(outs[1], outs[0], 1e-2, where + ", " + call);
      };
      const auto scale_by_input_rms = [&](cuda::GemvArgs& a) {
        a.norm.input_sum_squares = static_cast<const cuda::GemvNormSum*>(input_sums.data), a.norm.eps = 1e-6f;
      };
      both("fused SiLU", [](cuda::GemvArgs& a) { a.swiglu = true; });
      both("fused SiLU of the input scaled by its rms", [&](cuda::GemvArgs& a) {
        a.swiglu = true;
        scale_by_input_rms(a);
      });
      both("input scaled by its rms", scale_by_input_rms);
      // The residual's call, each kernel from the same residual and zeroed sums.
      ResidualCall calls[2] = {residual_call(x, w, norm_weight, residual_values, t, n, k),
                               residual_call(x, w, norm_weight, residual_values, t, n, k)};
      for (const bool streamed : {false, true}) {
        const cuda::GemvArgs& a = calls[streamed].args;
        ASSERT_TRUE(cuda::gemv_streamed_supports(a)) << where;
        if (streamed) {
          cuda::launch_gemv_streamed(a, sms == 0 ? sm_count() : sms, gpu().stream());
        } else {
          cuda::launch_gemv_rounds(a, sms == 0 ? sm_count() : sms, gpu().stream());
        }
        finish(calls[streamed], where);
        if (HasFailure()) return;
      }
      expect_rel_l2(calls[1].residual_values, calls[0].residual_values, 1e-2, where + ": residual");
      expect_rel_l2(calls[1].out_values, calls[0].out_values, 1e-2, where + ": residual x weight");
      for (int r = 0; r < t; ++r) {
        const double a = norm_sum_of(calls[0].sum_words, r), b = norm_sum_of(calls[1].sum_words, r);
        EXPECT_NEAR(b, a, 1e-2 * a) << where << ": sum of squares of row " << r;
      }
      if (HasFailure()) return;
    }
  }
}

// Above 16 tokens a grid under one wave runs as two slices of 16 tokens (gemv.cu's layout_for). The grid follows the
// SM count the launch is given, so both layouts run here on any GPU: 132 SMs slice these calls (two slices of 64 CTAs
// of 16 rows), one SM never does; the layout is checked first, so that the test keeps covering both.
TEST_F(GemvTest, TokenSlicesAndOneSliceMatchCpu) {
  struct Case {
    int n, k;
    std::vector<int> tokens;
  };
  for (const int sms : {132, 1}) {
    SCOPED_TRACE("launched for " + std::to_string(sms) + " SMs");
    for (const Case& c : {Case{1024, 2048, {17, 24, 32}}, Case{1000, 200, {17, 31}}}) {
      for (const int t : c.tokens) {
        cuda::GemvArgs shape;
        shape.tokens = t, shape.n = c.n, shape.k = c.k;
        EXPECT_EQ(cuda::gemv_token_slices(shape, sms), sms == 1 ? 1 : 2) << describe(t, c.n, c.k, false, DType::BF16);
      }
      check_shape(c.n, c.k, c.tokens, sms);
    }
    if (HasFailure()) return;
  }
}

// The lm_head of Qwen3-0.6B at decode: 151936 rows, fp32 logits.
TEST_F(GemvTest, LmHeadDecode) { check_shape(151936, 1024, {1}); }

// Gemm::run routes small M to the GEMV; its result agrees with cuBLASLt's on the same inputs, every call
// gives the same bits, and a captured launch replays correctly.
TEST_F(GemvTest, GemmRoutesSmallMAndAgreesWithCublasLt) {
  const int n = 1024, k = 2048;
  Tensor workspace = gpu_empty(DType::BF16, {16 << 20}, false);  // 32 MiB
  cuda::Gemm gemm(workspace.data, workspace.bytes());
  const auto w = random_bf16_values(rng_, int64_t{n} * k, 0.1f);
  const auto b = random_bf16_values(rng_, n);
  const Tensor gpu_w = gpu_bf16(w, {n, k}), gpu_b = gpu_bf16(b, {n});
  for (int t : {1, 5, cuda::kGemvMaxTokens}) {
    const auto x = random_bf16_values(rng_, int64_t{t} * k);
    const Tensor gpu_x = gpu_bf16(x, {t, k});
    Tensor via_run = gpu_empty(DType::BF16, {t, n}), via_cublas = gpu_empty(DType::BF16, {t, n});
    const auto* xp = gpu_x.as<__nv_bfloat16>();
    const auto* wp = gpu_w.as<__nv_bfloat16>();
    const auto* bp = gpu_b.as<__nv_bfloat16>();
    gemm.run(xp, wp, bp, via_run.data, DType::BF16, t, n, k, gpu().stream());
    gemm.run_cublaslt(xp, wp, bp, via_cublas.data, DType::BF16, t, n, k, gpu().stream());
    const auto first = read_gpu(via_run);
    expect_rel_l2(first, read_gpu(via_cublas), 1e-2, "gemv vs cuBLASLt T=" + std::to_string(t));

    gemm.run(xp, wp, bp, via_run.data, DType::BF16, t, n, k, gpu().stream());
    EXPECT_EQ(read_gpu(via_run), first) << "T=" << t << ": not deterministic";

    Tensor captured = gpu_empty(DType::BF16, {t, n});
    CudaGraph graph = gpu().capture([&] { gemm.run(xp, wp, bp, captured.data, DType::BF16, t, n, k, gpu().stream()); });
    gpu().replay(graph);
    gpu().synchronize();
    EXPECT_EQ(read_gpu(captured), first) << "T=" << t << ": graph replay differs";
  }
}

// Under programmatic dependent launch (on by default on sm_90) a GEMV reads x only after the previous kernel
// is done: chain y = x W1^T, z = y W2^T, eagerly and as a replayed graph (y is re-poisoned before each run, so
// reading it early gives NaN or stale values).
TEST_F(GemvTest, OverlappedLaunchReadsThePreviousKernelsOutput) {
  const int sms = sm_count();
  const auto link = [&](const Tensor& in, const Tensor& w, Tensor& out, int n, int k) {
    cuda::launch_gemv({in.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), nullptr, out.data, out.dtype,
                       static_cast<int>(in.shape[0]), n, k},
                      sms, gpu().stream());
  };
  expect_chain_replays(3, 1024, 3072, 1024, DType::F32, link,
                       [](const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
                         expect_rel_l2(got, want, 1e-4, "overlapped GEMV, " + what);
                       });
}

// Through CudaBackend::linear (the path the model runner takes) at a decode batch.
TEST_F(GemvTest, BackendLinearAtDecodeBatch) {
  const int t = 4, n = 4096, k = 1024;
  const auto x = random_bf16_values(rng_, int64_t{t} * k);
  const auto w = random_bf16_values(rng_, int64_t{n} * k, 0.1f);
  Tensor out = gpu_empty(DType::BF16, {t, n});
  gpu().linear(gpu_bf16(x, {t, k}), gpu_bf16(w, {n, k}), Tensor(), out);
  Tensor want = cpu_empty(DType::F32, {t, n});
  cpu().linear(cpu_f32(x, {t, k}), cpu_f32(w, {n, k}), Tensor(), want);
  expect_rel_l2(read_gpu(out), read_cpu(want), 1e-2, "linear T=4 qkv");
}

// The MLP's gate_up and SiLU in one call (linear_silu_and_mul) against the two calls it stands for, on the same
// inputs: the same bits, bf16 and FP8 weights, every token count with a code path (one to four row groups, bf16 two
// mma tiles), I from
// one CTA of the largest groups to Qwen3-8B's TP-4 shard, K not a multiple of the 128-wide scale blocks. Outputs
// are NaN-poisoned. Calls the fused kernel does not take (more than 32 rows, FP8 codes at more than 16 or of 32 M
// elements or more, I not a multiple of 16, the CPU backend) return false and write nothing.
TEST_F(GemvTest, FusedSiluMatchesLinearThenSilu) {
  struct Shape {
    int inter, k;
  };
  for (const bool fp8 : {false, true}) {
    for (const Shape s :
         {Shape{16, 64}, Shape{48, 1040}, Shape{1536, 1024}, Shape{3072, 1024}, Shape{1024, 3072}, Shape{3072, 4096}}) {
      const int n = 2 * s.inter;
      const int64_t sn = (n + 127) / 128, sk = (s.k + 127) / 128;
      const auto w = fp8 ? random_fp8_codes(rng_, int64_t{n} * s.k) : std::vector<uint8_t>{};
      const auto w_bf16 = fp8 ? std::vector<float>{} : random_bf16_values(rng_, int64_t{n} * s.k, 0.1f);
      const auto scales = random_fp8_scales(rng_, sn * sk);
      const Tensor weight = fp8 ? gpu_raw(w, DType::F8_E4M3, {n, s.k}) : gpu_bf16(w_bf16, {n, s.k});
      const Tensor scale = fp8 ? gpu_raw(scales, DType::F32, {sn, sk}) : Tensor();
      if (fp8) gpu().reserve_fp8_linear(n, s.k);
      for (const int t : {1, 2, 3, 8, 9, 16, 17, 32}) {
        if (t > cuda::kGemvMaxTokensAnyWeight && (fp8 || int64_t{n} * s.k >= cuda::kGemvMaxWideWeight)) continue;
        const std::string where = std::string(fp8 ? "fp8" : "bf16") + " I=" + std::to_string(s.inter) +
                                  " K=" + std::to_string(s.k) + " T=" + std::to_string(t);
        const Tensor x = gpu_bf16(random_bf16_values(rng_, int64_t{t} * s.k), {t, s.k});
        Tensor fused = gpu_empty(DType::BF16, {t, s.inter}), gate_up = gpu_empty(DType::BF16, {t, n}),
               apart = gpu_empty(DType::BF16, {t, s.inter});
        ASSERT_TRUE(gpu().linear_silu_and_mul(x, weight, scale, {}, fused)) << where;
        if (fp8) {
          gpu().linear_fp8(x, weight, scale, Tensor(), gate_up);
        } else {
          gpu().linear(x, weight, Tensor(), gate_up);
        }
        gpu().silu_and_mul(gate_up, apart);
        const auto got = read_gpu(fused), want = read_gpu(apart);
        ASSERT_EQ(read_gpu_bytes(fused), read_gpu_bytes(apart))
            << where << ": first value " << got[0] << " vs " << want[0];
        for (const float v : got) ASSERT_TRUE(std::isfinite(v)) << where;
      }
    }
  }
  // Not taken: more rows than the GEMV and the skinny GEMM take, FP8 codes at 17 rows, I = 24, the CPU backend.
  const auto w = random_bf16_values(rng_, 2 * 24 * 64, 0.1f);
  const int rows = cuda::kSkinnyGemmSmallWeightMaxTokens + 1;
  Tensor out = gpu_empty(DType::BF16, {rows, 32});
  EXPECT_FALSE(gpu().linear_silu_and_mul(gpu_bf16(random_bf16_values(rng_, rows * 64), {rows, 64}),
                                         gpu_bf16(random_bf16_values(rng_, 64 * 64, 0.1f), {64, 64}), Tensor(), {},
                                         out));
  Tensor out_fp8 = gpu_empty(DType::BF16, {17, 64});
  gpu().reserve_fp8_linear(128, 128);
  EXPECT_FALSE(gpu().linear_silu_and_mul(gpu_bf16(random_bf16_values(rng_, 17 * 128), {17, 128}),
                                         gpu_raw(random_fp8_codes(rng_, 128 * 128), DType::F8_E4M3, {128, 128}),
                                         gpu_raw(random_fp8_scales(rng_, 1), DType::F32, {1, 1}), {}, out_fp8));
  for (const float v : read_gpu(out_fp8)) ASSERT_TRUE(std::isnan(v)) << "a refused FP8 call wrote its output";
  Tensor out24 = gpu_empty(DType::BF16, {1, 24});
  EXPECT_FALSE(gpu().linear_silu_and_mul(gpu_bf16(random_bf16_values(rng_, 64), {1, 64}), gpu_bf16(w, {48, 64}),
                                         Tensor(), {}, out24));
  for (const float v : read_gpu(out)) ASSERT_TRUE(std::isnan(v)) << "a refused call wrote its output";
  for (const float v : read_gpu(out24)) ASSERT_TRUE(std::isnan(v)) << "a refused call wrote its output";
  // FP8 codes of 2 x 4096 x 4096 = 32 M elements: over the bound.
  const int64_t big = 4096;
  Tensor out_big = gpu_empty(DType::BF16, {1, big});
  gpu().reserve_fp8_linear(2 * big, big);
  EXPECT_FALSE(gpu().linear_silu_and_mul(gpu_bf16(random_bf16_values(rng_, big), {1, big}),
                                         gpu_raw(random_fp8_codes(rng_, 2 * big * big), DType::F8_E4M3, {2 * big, big}),
                                         gpu_raw(random_fp8_scales(rng_, 64 * 32), DType::F32, {64, 32}), {}, out_big));
  for (const float v : read_gpu(out_big)) ASSERT_TRUE(std::isnan(v)) << "a refused FP8 call wrote its output";
  Tensor cpu_out = cpu_empty(DType::F32, {1, 24});
  EXPECT_FALSE(cpu().linear_silu_and_mul(cpu_f32(random_bf16_values(rng_, 64), {1, 64}), cpu_f32(w, {48, 64}), Tensor(),
                                         {}, cpu_out));
}

// Which calls the GEMV takes (host logic only: the pointers are never dereferenced).
TEST(GemvSupports, Limits) {
  const auto* aligned = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{4096});
  const auto* misaligned = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{4096 + 8});
  void* out = reinterpret_cast<void*>(uintptr_t{8192});
  const cuda::GemvArgs ok{aligned, aligned, nullptr, out, DType::BF16, 1, 17, 64};
  EXPECT_TRUE(cuda::gemv_supports(ok));
  auto with = [&](auto change) {
    cuda::GemvArgs a = ok;
    change(a);
    return cuda::gemv_supports(a);
  };
  EXPECT_TRUE(with([](cuda::GemvArgs& a) { a.tokens = cuda::kGemvMaxTokens; }));
  EXPECT_FALSE(with([](cuda::GemvArgs& a) { a.tokens = cuda::kGemvMaxTokens + 1; }));
  // Above 16 rows: bf16 weights of fewer than kGemvMaxWideWeight elements (the fused SiLU's counted whole).
  const auto wide_rows = [&](int n, int k, bool swiglu, bool fp8) {
    return with([&](cuda::GemvArgs& a) {
      a.tokens = cuda::kGemvMaxTokensAnyWeight + 1, a.n = n, a.k = k, a.swiglu = swiglu;
      if (fp8) {
        a.weight = nullptr, a.block_scale = reinterpret_cast<const float*>(aligned);
        a.weight_fp8 = reinterpret_cast<const uint8_t*>(aligned);
      }
    });
  };
  EXPECT_TRUE(wide_rows(4096, 4096 - 8, false, false));  // just under kGemvMaxWideWeight
  EXPECT_FALSE(wide_rows(4096, 4096, false, false));
  EXPECT_TRUE(wide_rows(2048, 4096 - 8, true, false));
  EXPECT_FALSE(wide_rows(2048, 4096, true, false));
  EXPECT_FALSE(wide_rows(1024, 1024, false, true));
  EXPECT_TRUE(with([](cuda::GemvArgs& a) { a.tokens = cuda::kGemvMaxTokensAnyWeight, a.n = 4096, a.k = 4096; }));
  EXPECT_FALSE(with([](cuda::GemvArgs& a) { a.tokens = 0; }));
  EXPECT_FALSE(with([](cuda::GemvArgs& a) { a.k = 60; }));
  EXPECT_FALSE(with([](cuda::GemvArgs& a) { a.n = 0; }));
  EXPECT_FALSE(with([&](cuda::GemvArgs& a) { a.x = misaligned; }));
  EXPECT_FALSE(with([&](cuda::GemvArgs& a) { a.weight = misaligned; }));
  EXPECT_FALSE(with([](cuda::GemvArgs& a) { a.out_dtype = DType::I32; }));
  EXPECT_TRUE(with([](cuda::GemvArgs& a) { a.out_dtype = DType::F32; }));
  // The fused SiLU: n a multiple of 16, bf16 out, no bias.
  const auto swiglu = [&](int n, DType out_dtype, bool bias) {
    return with([&](cuda::GemvArgs& a) {
      a.swiglu = true, a.n = n, a.out_dtype = out_dtype, a.bias = bias ? aligned : nullptr;
    });
  };
  EXPECT_TRUE(swiglu(48, DType::BF16, false));
  EXPECT_FALSE(swiglu(40, DType::BF16, false));
  EXPECT_FALSE(swiglu(48, DType::F32, false));
  EXPECT_FALSE(swiglu(48, DType::BF16, true));
  EXPECT_TRUE(with([&](cuda::GemvArgs& a) {
    a.swiglu = true, a.n = 4096, a.k = 4096 - 16, a.weight = nullptr,
    a.block_scale = reinterpret_cast<const float*>(aligned);
    a.weight_fp8 = reinterpret_cast<const uint8_t*>(aligned);
  }));
  EXPECT_FALSE(with([&](cuda::GemvArgs& a) {
    a.swiglu = true, a.n = 4096, a.k = 4096, a.weight = nullptr,
    a.block_scale = reinterpret_cast<const float*>(aligned);
    a.weight_fp8 = reinterpret_cast<const uint8_t*>(aligned);
  }));
  EXPECT_THROW(cuda::launch_gemv(cuda::GemvArgs{}, 132, nullptr), InvalidInput);
  // A refused fused call names the fused call's needs.
  cuda::GemvArgs fused_odd = ok;
  fused_odd.swiglu = true, fused_odd.n = 40;
  nanovllm::testing::expect_invalid([&] { cuda::launch_gemv(fused_odd, 132, nullptr); },
                                    {"n=40", "fused SiLU: n % 16 == 0"});
}

}  // namespace
}  // namespace nanovllm::test
