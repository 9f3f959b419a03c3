// An RMSNorm folded into the linears around it (Backend::linear_add_folded_norm and linear_folded_norm_input, or
// linear_silu_and_mul with an input norm) against the calls it stands for: linear, add_rms_norm, linear. Checked on
// the same inputs, every token count with a GEMV code path, a hidden size of one CTA's rows up to Qwen3-8B's: the
// residual bit for bit (the same GEMV sums, added and rounded as add_rms_norm does), the half-normed output bit for bit
// against residual * weight, the sums of squares against the host's, and the final products within bf16 rounding of
// both the unfolded GPU calls and the fp32 CPU backend. Outputs are NaN-poisoned. FP8 weights are not folded (measured
// slower): refused.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {
namespace {

class FoldedNormTest : public CudaOpsTest {
 protected:
  // A bf16 weight [n, k] for x [T, k] . W^T.
  Tensor make_weight(int n, int k) { return gpu_bf16(random_bf16_values(rng_, int64_t{n} * k, 0.1f), {n, k}); }
};

float round_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

TEST_F(FoldedNormTest, MatchesLinearAddRmsNormLinear) {
  const float eps = 1e-6f;
  struct Shape {
    int hidden, in, out, inter;  // the norm's width, the first linear's K, the second's N, gate_up's I
  };
  for (const Shape s : {Shape{32, 48, 40, 16}, Shape{1024, 2048, 4096, 3072}, Shape{4096, 4096, 6144, 1536}}) {
    const Tensor first = make_weight(s.hidden, s.in), second = make_weight(s.out, s.hidden),
                 gate_up = make_weight(2 * s.inter, s.hidden);
    const auto norm_values = random_bf16_values(rng_, s.hidden);
    const Tensor norm_weight = gpu_bf16(norm_values, {s.hidden});
    const Tensor bias = gpu_bf16(random_bf16_values(rng_, s.out), {s.out});
    const int64_t pieces_per_row = gpu().folded_norm_pieces(s.hidden);
    for (const int t : {1, 2, 3, 8, 9, 16}) {
      const std::string where = "H=" + std::to_string(s.hidden) + " T=" + std::to_string(t);
      if (!gpu().supports_norm_fold(t, s.hidden, DType::BF16)) {
        // 16 KiB of pieces: Qwen3-8B's width folds up to 8 rows.
        EXPECT_TRUE(s.hidden == 4096 && t > 8) << where << ": refused";
        continue;
      }
      const auto x_values = random_bf16_values(rng_, int64_t{t} * s.in);
      // Row r of the residual scaled by r + 1, so that a product scaled by another row's rms is far off.
      auto residual_values = random_bf16_values(rng_, int64_t{t} * s.hidden);
      for (size_t i = 0; i < residual_values.size(); ++i) {
        const size_t row = i / static_cast<size_t>(s.hidden);
        residual_values[i] = round_bf16(residual_values[i] * static_cast<float>(row + 1));
      }
      const Tensor x = gpu_bf16(x_values, {t, s.in});

      // Apart: linear, add_rms_norm, then the second linear and gate_up + SiLU.
      Tensor delta = gpu_empty(DType::BF16, {t, s.hidden}), normed = gpu_empty(DType::BF16, {t, s.hidden});
      Tensor residual_apart = gpu_bf16(residual_values, {t, s.hidden});
      Tensor out_apart = gpu_empty(DType::BF16, {t, s.out}), act_apart = gpu_empty(DType::BF16, {t, s.inter});
      gpu().linear(x, first, Tensor(), delta);
      gpu().add_rms_norm(delta, residual_apart, norm_weight, eps, normed);
      gpu().linear(normed, second, bias, out_apart);
      ASSERT_TRUE(gpu().linear_silu_and_mul(normed, gate_up, Tensor(), {}, act_apart)) << where;

      // Folded.
      Tensor residual = gpu_bf16(residual_values, {t, s.hidden}), half_normed = gpu_empty(DType::BF16, {t, s.hidden});
      Tensor pieces = gpu_empty(DType::F32, {t, pieces_per_row});
      Tensor out = gpu_empty(DType::BF16, {t, s.out}), act = gpu_empty(DType::BF16, {t, s.inter});
      gpu().linear_add_folded_norm(x, first, Tensor(), residual, norm_weight, pieces, half_normed);
      const FoldedNormInput input{pieces, eps};
      gpu().linear_folded_norm_input(half_normed, second, Tensor(), bias, input, out);
      ASSERT_TRUE(gpu().linear_silu_and_mul(half_normed, gate_up, Tensor(), input, act)) << where;

      ASSERT_EQ(read_gpu_bytes(residual), read_gpu_bytes(residual_apart)) << where << ": residual";
      const auto h = read_gpu(residual), got_half = read_gpu(half_normed), got_pieces = read_gpu(pieces);
      for (int r = 0; r < t; ++r) {
        for (int p = 0; p < pieces_per_row; ++p) {
          double sum = 0.0;
          for (int j = 8 * p; j < 8 * p + 8 && j < s.hidden; ++j) {
            const float v = h[static_cast<size_t>(r) * s.hidden + j];
            sum += static_cast<double>(v) * v;
          }
          const float got = got_pieces[static_cast<size_t>(r) * pieces_per_row + p];
          ASSERT_NEAR(got, sum, 1e-5 * sum + 1e-30) << where << ": row " << r << " piece " << p;
        }
        for (int j = 0; j < s.hidden; ++j) {
          const size_t i = static_cast<size_t>(r) * s.hidden + j;
          ASSERT_EQ(got_half[i], round_bf16(h[i] * norm_values[static_cast<size_t>(j)]))
              << where << ": residual * weight at row " << r << " column " << j;
        }
      }
      expect_rel_l2(read_gpu(out), read_gpu(out_apart), 1e-2, where + ": second linear against apart");
      expect_rel_l2(read_gpu(act), read_gpu(act_apart), 1e-2, where + ": gate_up + SiLU against apart");

      // And against the fp32 CPU backend on the bf16 values: rms_norm of the folded residual, then the linear.
      const auto w_values = read_gpu(second);
      Tensor cpu_normed = cpu_empty(DType::F32, {t, s.hidden}), want = cpu_empty(DType::F32, {t, s.out});
      cpu().rms_norm(cpu_f32(h, {t, s.hidden}), cpu_f32(norm_values, {s.hidden}), eps, cpu_normed);
      cpu().linear(cpu_normed, cpu_f32(w_values, {s.out, s.hidden}), cpu_f32(read_gpu(bias), {s.out}), want);
      expect_rel_l2(read_gpu(out), read_cpu(want), 1e-2, where + ": second linear against the CPU");
    }
  }
}

// Where the fold is not offered: more than 16 rows, pieces over 16 KiB, a width not a multiple of 32, FP8 weights,
// the CPU. An FP8 call with an input norm is refused without writing (linear_silu_and_mul) or with an error.
TEST_F(FoldedNormTest, SupportLimits) {
  gpu().reserve_fp8_linear(64, 64);
  const Tensor codes = gpu_raw(random_fp8_codes(rng_, 64 * 64), DType::F8_E4M3, {64, 64});
  const Tensor scales = gpu_raw(random_fp8_scales(rng_, 1), DType::F32, {1, 1});
  const Tensor x = gpu_bf16(random_bf16_values(rng_, 64), {1, 64});
  const FoldedNormInput input{gpu_raw(std::vector<float>(8, 1.0f), DType::F32, {1, 8}), 1e-6f};
  Tensor act = gpu_empty(DType::BF16, {1, 32}), out = gpu_empty(DType::BF16, {1, 64});
  EXPECT_FALSE(gpu().linear_silu_and_mul(x, codes, scales, input, act));
  for (const float v : read_gpu(act)) ASSERT_TRUE(std::isnan(v)) << "a refused call wrote its output";
  EXPECT_THROW(gpu().linear_folded_norm_input(x, codes, scales, Tensor(), input, out), EngineError);

  EXPECT_TRUE(gpu().supports_norm_fold(16, 1024, DType::BF16));
  EXPECT_FALSE(gpu().supports_norm_fold(17, 1024, DType::BF16));
  EXPECT_FALSE(gpu().supports_norm_fold(0, 1024, DType::BF16));
  EXPECT_TRUE(gpu().supports_norm_fold(8, 4096, DType::BF16));
  EXPECT_FALSE(gpu().supports_norm_fold(9, 4096, DType::BF16));
  EXPECT_FALSE(gpu().supports_norm_fold(1, 1000, DType::BF16));
  EXPECT_FALSE(gpu().supports_norm_fold(1, 1024, DType::F8_E4M3));
  EXPECT_EQ(gpu().folded_norm_pieces(1024), 128);
  EXPECT_FALSE(cpu().supports_norm_fold(1, 1024, DType::F32));
}

}  // namespace
}  // namespace nanovllm::test
