// The skinny GEMM (src/backend/cuda/gemm_skinny.cu) against the fp32 CPU backend on the same bf16 inputs: every
// wgmma width it has (token counts 1 to 256 around 32, 64 and 128), N that is not a multiple of the 64-row tile, K
// with a partial last 64-column tile, K split over 1 to 32 CTAs (launched for 1, 3 and this GPU's SMs), with and
// without bias. Outputs are NaN-poisoned first, so an unwritten element fails; each element must be within bf16
// rounding of the reference, not only the whole tensor.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_skinny.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/sm90a_code.h"
#include "tests/cuda/ops/ops_test_support.h"
#include "tests/support/expect_invalid.h"

namespace nanovllm::test {
namespace {

std::string describe(int t, int n, int k, bool bias, const cuda::SkinnyGemmConfig& c) {
  return "T=" + std::to_string(t) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + (bias ? " bias" : "") +
         " tiles " + std::to_string(c.tile_rows) + "x" + std::to_string(c.token_tile) + " splits " +
         std::to_string(c.splits);
}

// Every tile shape with K unsplit and split in 2 and 5; and the configuration chosen for this GPU (config.splits 0).
std::vector<cuda::SkinnyGemmConfig> every_config() {
  std::vector<cuda::SkinnyGemmConfig> configs;
  for (int rows : {64, 128}) {
    for (int tokens : {32, 64, 128}) {
      for (int splits : {1, 2, 5}) configs.push_back({rows, tokens, splits});
    }
  }
  configs.push_back({0, 0, 0});
  return configs;
}

// Every element within bf16's rounding (2^-8 relative) of the fp32 reference, plus a little of the tensor's scale
// for the different summation order; NaN fails.
void expect_close_elements(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = std::fabs(want[i]) / 128.0 + 1e-3 * scale;
    if (!(std::fabs(got[i] - want[i]) <= bound)) {
      FAIL() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
    }
  }
}

class SkinnyGemmTest : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    if (!cuda::sm90a_code_built()) GTEST_SKIP() << "no sm_90a code in this build";
    if (!cuda::sm90a_code_runs_here()) GTEST_SKIP() << "the skinny GEMM is sm_90a code";
    const size_t partial_floats = size_t{8} << 20;
    keep_.push_back(gpu().allocate(partial_floats * sizeof(float)));
    workspace_.partials = static_cast<float*>(keep_.back().data());
    workspace_.partial_floats = partial_floats;
    keep_.push_back(gpu().allocate(kCounters * sizeof(unsigned)));
    workspace_.counters = static_cast<unsigned*>(keep_.back().data());
    workspace_.counter_count = kCounters;
    const std::vector<unsigned> zeros(kCounters, 0);
    gpu().upload(zeros.data(), workspace_.counters, kCounters * sizeof(unsigned));
  }
  int sm_count() {
    int device = 0, count = 0;
    EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
    return count;
  }

  void check_shape(int n, int k, const std::vector<int>& token_counts,
                   const std::vector<cuda::SkinnyGemmConfig>& configs = every_config()) {
    for_each_random_linear(
        n, k, token_counts, [](int) { return true; },
        [&](int t, bool bias, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
            const std::vector<float>& reference) {
          for (cuda::SkinnyGemmConfig config : configs) {
            Tensor out = gpu_empty(DType::BF16, {t, n});  // NaN-poisoned
            const cuda::SkinnyGemmArgs args{x, w, b, out.as<__nv_bfloat16>(), t, n, k};
            if (config.splits == 0) config = cuda::skinny_gemm_config(args, sm_count());
            cuda::launch_skinny_gemm(args, workspace_, config, gpu().stream());
            expect_close_elements(read_gpu(out), reference, describe(t, n, k, bias, config));
            if (HasFailure()) return false;
          }
          return true;
        });
  }

  static constexpr int kCounters = 4096;
  cuda::SkinnyGemmWorkspace workspace_;
  std::vector<Buffer> keep_;  // the workspace's memory
};

TEST_F(SkinnyGemmTest, WidthsAndSplitsMatchCpu) {
  // Token counts around every token tile (several token tiles from 33 on), K of 32 64-column tiles (splits of 7 and
  // 2, 5 of 7 and 2 of 5 tiles: the last split short).
  check_shape(1024, 2048, {1, 17, 32, 33, 64, 65, 100, 128, 129, 256});
  // K of one partial tile (no split); K of 4 tiles split 2 and 5 ways (4 splits of one tile).
  check_shape(512, 200, {17, 129});
  check_shape(64, 8, {1, 256});
}

TEST_F(SkinnyGemmTest, PartialTilesMatchCpu) {
  // N not a multiple of the row tile (rows past N read as zero and are not stored); K with a partial last tile.
  for (int n : {8, 72, 1000}) check_shape(n, 1032, {17, 64, 200});
}

TEST_F(SkinnyGemmTest, Qwen3ShapesMatchCpu) {
  // Qwen3-0.6B's projections (qkv, o_proj, gate_up, down) with the configurations chosen for this GPU.
  for (auto [n, k] : {std::pair{4096, 1024}, {1024, 2048}, {6144, 1024}, {1024, 3072}})
    check_shape(n, k, {48, 96, 256}, {{0, 0, 0}});
}

// Split tiles count themselves in and the last resets its counter: a chain y = x W1^T, z = y W2^T, replayed as a
// graph with y re-poisoned before each replay, must give the same z every time (the second call starts under
// programmatic launch while the first finishes, and reads y only after it).
TEST_F(SkinnyGemmTest, ChainedCallsReplayAsAGraph) {
  const int sms = sm_count();
  const auto link = [&](const Tensor& in, const Tensor& w, Tensor& out, int n, int k) {
    cuda::launch_skinny_gemm({in.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), nullptr, out.as<__nv_bfloat16>(),
                              static_cast<int>(in.shape[0]), n, k},
                             workspace_, sms, gpu().stream());
  };
  // Each run gives the reference's values, and every run the same bits.
  std::vector<float> first;
  expect_chain_replays(40, 1024, 3072, 1024, DType::BF16, link,
                       [&](const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
                         expect_close_elements(got, want, "chained skinny GEMMs, " + what);
                         if (first.empty()) first = got;
                         EXPECT_EQ(got, first) << what;
                       });
}

// With a Gemm's own workspace and counters.
TEST_F(SkinnyGemmTest, GemmWorkspaceMatchesCpu) {
  const int t = 96, n = 1024, k = 3072;
  const auto x = random_bf16_values(rng_, int64_t{t} * k);
  const auto w = random_bf16_values(rng_, int64_t{n} * k, 0.1f);
  const Tensor gx = gpu_bf16(x, {t, k}), gw = gpu_bf16(w, {n, k});
  Tensor out = gpu_empty(DType::BF16, {t, n});
  keep_.push_back(gpu().allocate(size_t{32} << 20));
  cuda::Gemm gemm(keep_.back().data(), keep_.back().bytes());
  cuda::launch_skinny_gemm({gx.as<__nv_bfloat16>(), gw.as<__nv_bfloat16>(), nullptr, out.as<__nv_bfloat16>(), t, n, k},
                           gemm.skinny_workspace(), sm_count(), gpu().stream());
  Tensor want = cpu_empty(DType::F32, {t, n});
  cpu().linear(cpu_f32(x, {t, k}), cpu_f32(w, {n, k}), Tensor(), want);
  expect_close_elements(read_gpu(out), read_cpu(want), "the skinny GEMM with a Gemm's workspace");
}

// Gemm::run sends 17-64 rows (to 128 for small weights) to the skinny GEMM where the GEMV does not take them
// (Qwen3-8B's o_proj at 17-64, Qwen3-0.6B's above 32) and, from 17 rows, wide weights the GEMV would take (Qwen3-0.6B's
// qkv at 24): the same bits as the skinny GEMM launched directly, close to cuBLASLt.
TEST_F(SkinnyGemmTest, GemmRoutesDecodeRowsAndAgreesWithCublasLt) {
  keep_.push_back(gpu().allocate(size_t{32} << 20));
  cuda::Gemm gemm(keep_.back().data(), keep_.back().bytes());
  for (auto [t, n, k] :
       {std::tuple{48, 1024, 2048}, {64, 4096, 1024}, {24, 4096, 4096}, {96, 6144, 1024}, {24, 4096, 1024}}) {
    const auto x = random_bf16_values(rng_, int64_t{t} * k);
    const auto w = random_bf16_values(rng_, int64_t{n} * k, 0.1f);
    const Tensor gx = gpu_bf16(x, {t, k}), gw = gpu_bf16(w, {n, k});
    Tensor routed = gpu_empty(DType::BF16, {t, n}), direct = gpu_empty(DType::BF16, {t, n}),
           cublas = gpu_empty(DType::BF16, {t, n});
    const cuda::SkinnyGemmArgs args{
        gx.as<__nv_bfloat16>(), gw.as<__nv_bfloat16>(), nullptr, direct.as<__nv_bfloat16>(), t, n, k};
    const std::string where = "T=" + std::to_string(t) + " N=" + std::to_string(n) + " K=" + std::to_string(k);
    EXPECT_TRUE(gemm.skinny_takes(args)) << where;
    gemm.run(args.x, args.weight, nullptr, routed.data, DType::BF16, t, n, k, gpu().stream());
    cuda::launch_skinny_gemm(args, gemm.skinny_workspace(), sm_count(), gpu().stream());
    gemm.run_cublaslt(args.x, args.weight, nullptr, cublas.data, DType::BF16, t, n, k, gpu().stream());
    EXPECT_EQ(read_gpu_bytes(routed), read_gpu_bytes(direct)) << where << ": Gemm::run took another kernel";
    expect_close_elements(read_gpu(routed), read_gpu(cublas), where);
  }
  const auto* p = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{256});
  auto* out = reinterpret_cast<__nv_bfloat16*>(uintptr_t{256});
  // 65-128 rows only for weights under kSkinnyGemmSmallWeight elements.
  EXPECT_TRUE(gemm.skinny_takes({p, p, nullptr, out, 128, 1024, 1024}));
  EXPECT_FALSE(gemm.skinny_takes({p, p, nullptr, out, 129, 1024, 1024}));
  EXPECT_TRUE(gemm.skinny_takes({p, p, nullptr, out, 64, 4096, 4096}));
  EXPECT_FALSE(gemm.skinny_takes({p, p, nullptr, out, 65, 4096, 4096}));
  EXPECT_FALSE(gemm.skinny_takes({p, p, nullptr, out, 16, 1024, 1024}));
}

// The fused SiLU gives the same bits as the plain call on [gate; up] followed by silu_and_mul, with every
// configuration (a tile's outputs take half its rows: gate rows and the up rows of the same outputs), at I not a
// multiple of the tile's outputs; and through CudaBackend::linear_silu_and_mul at 33-128 rows (and 17-32 for wide
// weights).
TEST_F(SkinnyGemmTest, FusedSiluMatchesLinearThenSilu) {
  for (auto [inter, k] : {std::pair{24, 64}, {48, 1040}, {1000, 1024}, {3072, 1024}}) {
    const int n = 2 * inter;
    const Tensor w = gpu_bf16(random_bf16_values(rng_, int64_t{n} * k, 0.1f), {n, k});
    for (int t : {17, 48, 64, 100}) {
      const Tensor x = gpu_bf16(random_bf16_values(rng_, int64_t{t} * k), {t, k});
      Tensor fused = gpu_empty(DType::BF16, {t, inter}), gate_up = gpu_empty(DType::BF16, {t, n}),
             apart = gpu_empty(DType::BF16, {t, inter});
      for (cuda::SkinnyGemmConfig config : every_config()) {
        const cuda::SkinnyGemmArgs plain{
            x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), nullptr, gate_up.as<__nv_bfloat16>(), t, n, k};
        cuda::SkinnyGemmArgs swiglu{
            x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), nullptr, fused.as<__nv_bfloat16>(), t, inter, k};
        swiglu.swiglu = true;
        if (config.splits == 0) config = cuda::skinny_gemm_config(swiglu, sm_count());
        const std::string where = "I=" + std::to_string(inter) + " " + describe(t, n, k, false, config);
        cuda::launch_skinny_gemm(swiglu, workspace_, config, gpu().stream());
        cuda::launch_skinny_gemm(plain, workspace_, config, gpu().stream());
        gpu().silu_and_mul(gate_up, apart);
        ASSERT_EQ(read_gpu_bytes(fused), read_gpu_bytes(apart)) << where;
        for (const float v : read_gpu(fused)) ASSERT_TRUE(std::isfinite(v)) << where;
      }
      // Through the backend where linear() takes the skinny GEMM too (at up to 32 rows the narrower weights stay
      // on the GEMV).
      const bool routed = t > cuda::kGemvMaxTokens || cuda::skinny_gemm_preferred_over_gemv(t, n, k);
      if (!routed || t > cuda::skinny_gemm_route_max_tokens(int64_t{n} * k)) continue;
      Tensor backend = gpu_empty(DType::BF16, {t, inter});
      ASSERT_TRUE(gpu().linear_silu_and_mul(x, w, Tensor(), {}, backend)) << "I=" << inter << " T=" << t;
      gpu().linear(x, w, Tensor(), gate_up);
      gpu().silu_and_mul(gate_up, apart);
      ASSERT_EQ(read_gpu_bytes(backend), read_gpu_bytes(apart)) << "linear_silu_and_mul I=" << inter << " T=" << t;
    }
  }
}

// The folded norms (GemvArgs' two sides, gemv.h) against the GEMV's kernel on the same operands at rows both take (5,
// 24, 32) with every tile shape and split, and at 100 rows against the CPU: the input-scaled products (with and
// without the fused SiLU), and the residual call's new residual, its residual x weight, its sums of squares and the
// stale sums it zeroes.
TEST_F(SkinnyGemmTest, FoldedNormsMatchGemvAndCpu) {
  const int n = 512, k = 1032;  // a partial last k-tile
  const auto w_values = random_bf16_values(rng_, int64_t{2} * n * k, 0.1f);
  const Tensor w = gpu_bf16(w_values, {2 * n, k});
  const auto norm_values = random_bf16_values(rng_, n);
  const Tensor norm_weight = gpu_bf16(norm_values, {n});
  for (const int t : {5, 24, 32, 100}) {
    const Tensor x = gpu_bf16(random_bf16_values(rng_, int64_t{t} * k), {t, k});
    const Tensor input_sums = input_norm_sums(t);
    const auto residual_values = random_bf16_values(rng_, int64_t{t} * n);
    const bool against_gemv = t <= cuda::kGemvMaxTokens;
    // Above the GEMV's rows, the CPU's x . W^T in double: gate rows (and the residual call's), up rows.
    std::vector<double> gate_dots, up_dots;
    if (!against_gemv) {
      const auto xs = read_gpu(x);
      gate_dots.resize(static_cast<size_t>(t) * n), up_dots.resize(static_cast<size_t>(t) * n);
      for (int r = 0; r < t; ++r) {
        for (int c = 0; c < n; ++c) {
          double g = 0, u = 0;
          for (int i = 0; i < k; ++i) {
            const double xv = xs[static_cast<size_t>(r) * k + i];
            g += xv * w_values[static_cast<size_t>(c) * k + i];
            u += xv * w_values[static_cast<size_t>(c + n) * k + i];
          }
          gate_dots[static_cast<size_t>(r) * n + c] = g, up_dots[static_cast<size_t>(r) * n + c] = u;
        }
      }
    }
    for (const cuda::SkinnyGemmConfig& config : every_config()) {
      const std::string where = describe(t, n, k, false, config);
      // The call on the skinny GEMM with this configuration (the chosen one for {0, 0, 0}), or on the GEMV's kernel.
      const auto launch = [&](const cuda::GemvArgs& a, bool skinny) {
        if (!skinny) return cuda::launch_gemv_rounds(a, sm_count(), gpu().stream());
        const cuda::SkinnyGemmArgs sa = cuda::skinny_gemm_args(a);
        cuda::launch_skinny_gemm(sa, workspace_, config.splits == 0 ? cuda::skinny_gemm_config(sa, sm_count()) : config,
                                 gpu().stream());
      };
      // The input-scaled call, plain and with the SiLU, on both kernels (or the skinny GEMM and the CPU).
      for (const bool swiglu : {false, true}) {
        std::vector<float> outs[2];
        for (const bool skinny : {false, true}) {
          Tensor out = gpu_empty(DType::BF16, {t, n});
          cuda::GemvArgs a{x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), nullptr, out.data, DType::BF16, t, n, k};
          a.swiglu = swiglu;
          a.norm.input_sum_squares = static_cast<const cuda::GemvNormSum*>(input_sums.data), a.norm.eps = 1e-6f;
          if (!skinny && !against_gemv) continue;
          launch(a, skinny);
          outs[skinny] = read_gpu(out);
        }
        if (against_gemv) {
          expect_rel_l2(outs[1], outs[0], 1e-2, where + (swiglu ? ", scaled SiLU" : ", scaled"));
          continue;
        }
        // The CPU: the gate rows' products (with the SiLU, of the up rows' too), times 1 / rms of the row's sum.
        std::vector<float> want(static_cast<size_t>(t) * n);
        for (int r = 0; r < t; ++r) {
          const float inv = 1.0f / std::sqrt(1000.0f * static_cast<float>(r + 1) / static_cast<float>(k) + 1e-6f);
          for (int c = 0; c < n; ++c) {
            const size_t at = static_cast<size_t>(r) * n + c;
            const float gs = static_cast<float>(gate_dots[at]) * inv, us = static_cast<float>(up_dots[at]) * inv;
            want[at] = swiglu ? gs / (1.0f + std::exp(-gs)) * us : gs;
          }
        }
        expect_rel_l2(outs[1], want, 1e-2, where + (swiglu ? ", scaled SiLU vs CPU" : ", scaled vs CPU"));
      }
      // The residual's call.
      ResidualCall calls[2] = {residual_call(x, w, norm_weight, residual_values, t, n, k),
                               residual_call(x, w, norm_weight, residual_values, t, n, k)};
      for (const bool skinny : {false, true}) {
        if (!skinny && !against_gemv) continue;
        launch(calls[skinny].args, skinny);
        finish(calls[skinny], where);
        if (HasFailure()) return;
      }
      const std::vector<float>& residuals = calls[1].residual_values;
      // Whatever the reference, the skinny GEMM's own outputs agree with each other: residual x weight is its new
      // residual times the norm weight, and the sums are its new residual's squares.
      for (int r = 0; r < t; ++r) {
        double squares = 0;
        for (int c = 0; c < n; ++c) {
          const float h = residuals[static_cast<size_t>(r) * n + c];
          squares += static_cast<double>(h) * h;
          const float want_half = bf16_to_float(float_to_bf16(h * norm_values[c]));  // norm_values are bf16
          ASSERT_EQ(calls[1].out_values[static_cast<size_t>(r) * n + c], want_half)
              << where << " row " << r << " col " << c;
        }
        EXPECT_NEAR(norm_sum_of(calls[1].sum_words, r), squares, 1e-5 * squares)
            << where << ": sum of squares of row " << r;
      }
      if (against_gemv) {
        expect_rel_l2(residuals, calls[0].residual_values, 1e-2, where + ": residual");
        expect_rel_l2(calls[1].out_values, calls[0].out_values, 1e-2, where + ": residual x weight");
      } else {
        // The CPU's residual + x . W^T.
        std::vector<float> want(static_cast<size_t>(t) * n);
        for (size_t i = 0; i < want.size(); ++i) want[i] = residual_values[i] + static_cast<float>(gate_dots[i]);
        expect_rel_l2(residuals, want, 1e-2, where + ": residual vs CPU");
      }
      if (HasFailure()) return;
    }
  }
}

// NANOVLLM_SKINNY_GEMM caps the rows Gemm routes there; a value that is not a row count is refused by name.
TEST_F(SkinnyGemmTest, RowCapFromTheEnvironment) {
  keep_.push_back(gpu().allocate(size_t{32} << 20));
  const auto* p = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{256});
  auto* out = reinterpret_cast<__nv_bfloat16*>(uintptr_t{256});
  const cuda::SkinnyGemmArgs rows48{p, p, nullptr, out, 48, 1024, 1024};
  ASSERT_EQ(setenv("NANOVLLM_SKINNY_GEMM", "32", 1), 0);
  EXPECT_FALSE(cuda::Gemm(keep_.back().data(), keep_.back().bytes()).skinny_takes(rows48));
  ASSERT_EQ(setenv("NANOVLLM_SKINNY_GEMM", "48", 1), 0);
  EXPECT_TRUE(cuda::Gemm(keep_.back().data(), keep_.back().bytes()).skinny_takes(rows48));
  for (const char* bad : {"abc", "-1", "12x"}) {
    ASSERT_EQ(setenv("NANOVLLM_SKINNY_GEMM", bad, 1), 0);
    nanovllm::testing::expect_invalid([&] { cuda::Gemm(keep_.back().data(), keep_.back().bytes()); },
                                      {"NANOVLLM_SKINNY_GEMM", bad});
  }
  ASSERT_EQ(unsetenv("NANOVLLM_SKINNY_GEMM"), 0);
}

TEST(SkinnyGemmRoute, SmallWeightsTakeMoreRows) {
  EXPECT_EQ(cuda::skinny_gemm_route_max_tokens(int64_t{6144} * 1024), 128);  // Qwen3-0.6B's gate_up
  EXPECT_EQ(cuda::skinny_gemm_route_max_tokens(cuda::kSkinnyGemmSmallWeight - 1), 128);
  EXPECT_EQ(cuda::skinny_gemm_route_max_tokens(cuda::kSkinnyGemmSmallWeight), 64);
  EXPECT_EQ(cuda::skinny_gemm_route_max_tokens(int64_t{4096} * 4096), 64);  // Qwen3-8B's o_proj
}

TEST(SkinnyGemmRoute, WideWeightsLeaveTheGemvFrom17Rows) {
  EXPECT_TRUE(cuda::skinny_gemm_preferred_over_gemv(17, 4096, 1024));   // Qwen3-0.6B's qkv
  EXPECT_TRUE(cuda::skinny_gemm_preferred_over_gemv(32, 6144, 1024));   // its fused gate_up
  EXPECT_FALSE(cuda::skinny_gemm_preferred_over_gemv(16, 6144, 1024));  // the GEMV's own rows
  EXPECT_FALSE(cuda::skinny_gemm_preferred_over_gemv(32, 1024, 2048));  // o_proj
  EXPECT_FALSE(cuda::skinny_gemm_preferred_over_gemv(32, 1024, 3072));  // down
  EXPECT_FALSE(cuda::skinny_gemm_preferred_over_gemv(24, 2047, 1024));
}

TEST(SkinnyGemmSupports, RefusesWhatItCannotTake) {
  if (!cuda::sm90a_code_built()) GTEST_SKIP() << "no sm_90a code in this build";
  const auto* p = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{256});
  auto* out = reinterpret_cast<__nv_bfloat16*>(uintptr_t{256});
  const cuda::SkinnyGemmArgs ok{p, p, nullptr, out, 17, 64, 64};
  EXPECT_EQ(cuda::skinny_gemm_unsupported_because(ok), "");
  auto with = [&](auto change) {
    cuda::SkinnyGemmArgs a = ok;
    change(a);
    return cuda::skinny_gemm_unsupported_because(a);
  };
  EXPECT_NE(with([](auto& a) { a.tokens = 0; }).find("tokens 0"), std::string::npos);
  EXPECT_NE(with([](auto& a) { a.tokens = 257; }).find("tokens 257"), std::string::npos);
  EXPECT_NE(with([](auto& a) { a.k = 12; }).find("multiples of 8"), std::string::npos);
  EXPECT_NE(with([](auto& a) { a.n = 4; }).find("multiples of 8"), std::string::npos);
  EXPECT_NE(with([&](auto& a) { a.x = p + 1; }).find("16-byte aligned"), std::string::npos);
  EXPECT_NE(with([&](auto& a) {
              a.bias = p;
              a.swiglu = true;
            }).find("no bias"),
            std::string::npos);
  nanovllm::testing::expect_invalid(
      [&] {
        cuda::launch_skinny_gemm(cuda::SkinnyGemmArgs{p, p, nullptr, out, 300, 64, 64}, cuda::SkinnyGemmWorkspace{}, 1,
                                 nullptr);
      },
      {"skinny_gemm", "tokens=300"});
}

}  // namespace
}  // namespace nanovllm::test
