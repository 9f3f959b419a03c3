// An RMSNorm folded into the linears around it (Backend::linear_add_folded_norm and linear_folded_norm_input, or
// linear_silu_and_mul with an input norm) against the calls it stands for: linear, add_rms_norm, linear. Checked on
// the same inputs, bf16 and block-scaled FP8 weights, every token count with a GEMV code path, a hidden size of one
// CTA's rows up to Qwen3-8B's: the residual bit for bit (the same GEMV sums, added and rounded as add_rms_norm does),
// the half-normed output bit for bit against residual * weight, the fixed-point sums of squares against the host's,
// the stale sums zeroed, and the final products within bf16 rounding of both the unfolded GPU calls and (bf16) the
// fp32 CPU backend. Outputs are NaN-poisoned.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/gemv.h"
#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {
namespace {

// A linear's weight as the model holds it: bf16, or FP8 codes with their block scales.
struct Weight {
  Tensor weight, block_scale;
};

class FoldedNormTest : public CudaOpsTest {
 protected:
  Weight make_weight(int n, int k, bool fp8) {
    if (!fp8) return {gpu_bf16(random_bf16_values(rng_, int64_t{n} * k, 0.1f), {n, k}), Tensor()};
    const int64_t blocks_n = (n + 127) / 128, blocks_k = (k + 127) / 128;
    return {gpu_raw(random_fp8_codes(rng_, int64_t{n} * k), DType::F8_E4M3, {n, k}),
            gpu_raw(random_fp8_scales(rng_, blocks_n * blocks_k), DType::F32, {blocks_n, blocks_k})};
  }
  void linear(const Tensor& x, const Weight& w, const Tensor& bias, Tensor& out) {
    if (w.block_scale.empty()) return gpu().linear(x, w.weight, bias, out);
    gpu().linear_fp8(x, w.weight, w.block_scale, bias, out);
  }
  Tensor zero_sums(int64_t rows) {
    return gpu_raw(std::vector<int64_t>(static_cast<size_t>(rows * gpu().folded_norm_sum_words()), 0), DType::I64,
                   {rows, gpu().folded_norm_sum_words()});
  }
  // A row's sum of squares from its two words (whole part, fraction in units of 2^-40, each at the start of its
  // 128-byte line); NaN when flagged.
  double decoded_sum(const std::vector<int64_t>& words, int row) {
    const auto at = static_cast<size_t>(row * gpu().folded_norm_sum_words());
    const auto whole = static_cast<uint64_t>(words[at]);
    const auto fraction = static_cast<uint64_t>(words[at + 16]);
    if ((whole >> 63) != 0) return std::nan("");
    return static_cast<double>(whole) + std::ldexp(static_cast<double>(fraction), -40);
  }
  std::vector<int64_t> read_words(const Tensor& t) {
    std::vector<int64_t> out(static_cast<size_t>(t.numel()));
    gpu().download(t.data, out.data(), t.bytes());
    return out;
  }
};

float round_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

TEST_F(FoldedNormTest, MatchesLinearAddRmsNormLinear) {
  const float eps = 1e-6f;
  struct Shape {
    int hidden, in, out, inter;  // the norm's width, the first linear's K, the second's N, gate_up's I
  };
  gpu().reserve_fp8_linear(8192, 8192);
  ASSERT_EQ(gpu().folded_norm_sum_words(), 32);  // two 128-byte lines
  for (const bool fp8 : {false, true}) {
    // The last shape's first and second FP8 linears are over 32 M codes: the codes' other conversion (gemv.cu).
    for (const Shape s : {Shape{32, 48, 40, 16}, Shape{1024, 2048, 4096, 3072}, Shape{4096, 8192, 8192, 2048}}) {
      if (fp8 && s.hidden < 128) continue;  // FP8 codes: whole 16-code lane chunks of K
      const Weight first = make_weight(s.hidden, s.in, fp8), second = make_weight(s.out, s.hidden, fp8),
                   gate_up = make_weight(2 * s.inter, s.hidden, fp8);
      const auto norm_values = random_bf16_values(rng_, s.hidden);
      const Tensor norm_weight = gpu_bf16(norm_values, {s.hidden});
      const Tensor bias = gpu_bf16(random_bf16_values(rng_, s.out), {s.out});
      const int64_t largest =
          std::max({int64_t{s.hidden} * s.in, int64_t{s.out} * s.hidden, int64_t{2} * s.inter * s.hidden});
      for (const int t : {1, 2, 3, 8, 9, 16, 17, 31, 32}) {
        // The GEMV's row limits (gemv.h): above 16 rows bf16 weights under kGemvMaxWideWeight elements only.
        if (t > cuda::kGemvMaxTokensAnyWeight && (fp8 || largest >= cuda::kGemvMaxWideWeight)) continue;
        const std::string where =
            std::string(fp8 ? "FP8" : "bf16") + " H=" + std::to_string(s.hidden) + " T=" + std::to_string(t);
        // Offered where it pays (gemv_norm_fold_pays: not 1-4 rows of large FP8 weights); the kernels take the
        // calls either way, and must be right at every row count they take.
        ASSERT_EQ(gpu().supports_norm_fold(t, s.hidden, fp8 ? DType::F8_E4M3 : DType::BF16, largest),
                  cuda::gemv_norm_fold_pays(t, largest, fp8))
            << where;
        const auto x_values = random_bf16_values(rng_, int64_t{t} * s.in);
        // Row r of the residual scaled by r + 1, so that a product scaled by another row's rms is far off.
        auto residual_values = random_bf16_values(rng_, int64_t{t} * s.hidden);
        for (size_t i = 0; i < residual_values.size(); ++i) {
          const size_t row = i / static_cast<size_t>(s.hidden);
          residual_values[i] = round_bf16(residual_values[i] * static_cast<float>(row + 1));
        }
        const Tensor x = gpu_bf16(x_values, {t, s.in});

        // Apart: linear, add_rms_norm, then the second linear and gate_up + SiLU (or gate_up and silu_and_mul).
        Tensor delta = gpu_empty(DType::BF16, {t, s.hidden}), normed = gpu_empty(DType::BF16, {t, s.hidden});
        Tensor residual_apart = gpu_bf16(residual_values, {t, s.hidden});
        Tensor out_apart = gpu_empty(DType::BF16, {t, s.out}), act_apart = gpu_empty(DType::BF16, {t, s.inter});
        Tensor gate_up_out = gpu_empty(DType::BF16, {t, 2 * s.inter});
        linear(x, first, Tensor(), delta);
        gpu().add_rms_norm(delta, residual_apart, norm_weight, eps, normed);
        linear(normed, second, bias, out_apart);
        if (!gpu().linear_silu_and_mul(normed, gate_up.weight, gate_up.block_scale, {}, act_apart)) {
          linear(normed, gate_up, Tensor(), gate_up_out);
          gpu().silu_and_mul(gate_up_out, act_apart);
        }

        // Folded, with stale sums of garbage to zero.
        Tensor residual = gpu_bf16(residual_values, {t, s.hidden}), half_normed = gpu_empty(DType::BF16, {t, s.hidden});
        Tensor sums = zero_sums(t), stale = gpu_empty(DType::I64, {5, gpu().folded_norm_sum_words()});
        Tensor out = gpu_empty(DType::BF16, {t, s.out}), act = gpu_empty(DType::BF16, {t, s.inter});
        gpu().linear_add_folded_norm(x, first.weight, first.block_scale, residual, norm_weight, sums, stale,
                                     half_normed);
        const FoldedNormInput input{sums, eps};
        gpu().linear_folded_norm_input(half_normed, second.weight, second.block_scale, bias, input, out);
        if (!gpu().linear_silu_and_mul(half_normed, gate_up.weight, gate_up.block_scale, input, act)) {
          gpu().linear_folded_norm_input(half_normed, gate_up.weight, gate_up.block_scale, Tensor(), input,
                                         gate_up_out);
          gpu().silu_and_mul(gate_up_out, act);
        }

        ASSERT_EQ(read_gpu_bytes(residual), read_gpu_bytes(residual_apart)) << where << ": residual";
        const auto stale_words = read_words(stale);
        for (size_t at = 0; at < stale_words.size(); at += 16)  // whole, fraction: each at the start of a line
          ASSERT_EQ(stale_words[at], 0) << where << ": stale sums not zeroed at word " << at;
        const auto h = read_gpu(residual), got_half = read_gpu(half_normed);
        const auto words = read_words(sums);
        for (int r = 0; r < t; ++r) {
          double want = 0.0;
          for (int j = 0; j < s.hidden; ++j) {
            const float v = h[static_cast<size_t>(r) * s.hidden + j];
            want += static_cast<double>(v) * v;
          }
          ASSERT_NEAR(decoded_sum(words, r), want, 1e-6 * want) << where << ": row " << r << " sum of squares";
          for (int j = 0; j < s.hidden; ++j) {
            const size_t i = static_cast<size_t>(r) * s.hidden + j;
            ASSERT_EQ(got_half[i], round_bf16(h[i] * norm_values[static_cast<size_t>(j)]))
                << where << ": residual * weight at row " << r << " column " << j;
          }
        }
        expect_rel_l2(read_gpu(out), read_gpu(out_apart), 1e-2, where + ": second linear against apart");
        expect_rel_l2(read_gpu(act), read_gpu(act_apart), 1e-2, where + ": gate_up + SiLU against apart");
        if (fp8) continue;

        // And against the fp32 CPU backend on the bf16 values: rms_norm of the folded residual, then the linear.
        const auto w_values = read_gpu(second.weight);
        Tensor cpu_normed = cpu_empty(DType::F32, {t, s.hidden}), want = cpu_empty(DType::F32, {t, s.out});
        cpu().rms_norm(cpu_f32(h, {t, s.hidden}), cpu_f32(norm_values, {s.hidden}), eps, cpu_normed);
        cpu().linear(cpu_normed, cpu_f32(w_values, {s.out, s.hidden}), cpu_f32(read_gpu(bias), {s.out}), want);
        expect_rel_l2(read_gpu(out), read_cpu(want), 1e-2, where + ": second linear against the CPU");
      }
    }
  }
}

// Two norms in a row as the decode step folds them, each linear before a norm zeroing the other's sums, over three
// steps: every step's outputs are the first's bit for bit (sums left over would scale the second step's products).
TEST_F(FoldedNormTest, EachStepStartsFromZeroedSums) {
  const int t = 3, hidden = 256;
  const Weight w1 = make_weight(hidden, hidden, false), w2 = make_weight(hidden, hidden, false);
  const Tensor norm_weight = gpu_bf16(random_bf16_values(rng_, hidden), {hidden});
  const auto x_values = random_bf16_values(rng_, int64_t{t} * hidden);
  const auto residual_values = random_bf16_values(rng_, int64_t{t} * hidden);
  Tensor slots = zero_sums(2 * t);
  Tensor slot_a = slots.rows(0, t), slot_b = slots.rows(t, t);
  std::vector<float> first;
  for (int step = 0; step < 3; ++step) {
    const Tensor x = gpu_bf16(x_values, {t, hidden});
    Tensor residual = gpu_bf16(residual_values, {t, hidden});
    Tensor half = gpu_empty(DType::BF16, {t, hidden}), mid = gpu_empty(DType::BF16, {t, hidden});
    Tensor half2 = gpu_empty(DType::BF16, {t, hidden}), out = gpu_empty(DType::BF16, {t, hidden});
    gpu().linear_add_folded_norm(x, w1.weight, Tensor(), residual, norm_weight, slot_a, slot_b, half);
    gpu().linear_folded_norm_input(half, w2.weight, Tensor(), Tensor(), {slot_a, 1e-6f}, mid);
    gpu().linear_add_folded_norm(mid, w1.weight, Tensor(), residual, norm_weight, slot_b, slot_a, half2);
    gpu().linear_folded_norm_input(half2, w2.weight, Tensor(), Tensor(), {slot_b, 1e-6f}, out);
    const auto got = read_gpu(out);
    for (const float v : got) ASSERT_TRUE(std::isfinite(v)) << "step " << step;
    if (step == 0) {
      first = got;
    } else {
      ASSERT_EQ(got, first) << "step " << step << " differs from the first";
    }
  }
}

// A residual that is not finite makes its row's rms NaN, as in add_rms_norm, and leaves the other rows alone.
TEST_F(FoldedNormTest, NonFiniteResidualGivesNaNRow) {
  const int t = 2, hidden = 128;
  const Weight w1 = make_weight(hidden, hidden, false), w2 = make_weight(64, hidden, false);
  const Tensor norm_weight = gpu_bf16(random_bf16_values(rng_, hidden), {hidden});
  auto residual_values = random_bf16_values(rng_, int64_t{t} * hidden);
  residual_values[hidden + 17] = INFINITY;  // row 1
  const Tensor x = gpu_bf16(random_bf16_values(rng_, int64_t{t} * hidden), {t, hidden});
  Tensor residual = gpu_bf16(residual_values, {t, hidden}), half = gpu_empty(DType::BF16, {t, hidden});
  Tensor sums = zero_sums(t), out = gpu_empty(DType::BF16, {t, 64});
  Tensor no_stale;
  gpu().linear_add_folded_norm(x, w1.weight, Tensor(), residual, norm_weight, sums, no_stale, half);
  gpu().linear_folded_norm_input(half, w2.weight, Tensor(), Tensor(), {sums, 1e-6f}, out);
  const auto got = read_gpu(out);
  for (int j = 0; j < 64; ++j) {
    EXPECT_TRUE(std::isfinite(got[static_cast<size_t>(j)])) << "row 0 column " << j;
    EXPECT_TRUE(std::isnan(got[static_cast<size_t>(64 + j)])) << "row 1 column " << j;
  }
}

// The rule alone (no GPU needed): FP8 codes of weights from kGemvFp8UnfoldedMinWeight elements fold from 5 rows.
TEST(GemvNormFoldRule, LargeFp8WeightsFoldFromFiveRows) {
  const int64_t qwen3_8b_gate_up = int64_t{24576} * 4096, qwen3_06b_gate_up = int64_t{6144} * 1024;
  EXPECT_FALSE(cuda::gemv_norm_fold_pays(1, qwen3_8b_gate_up, true));
  EXPECT_FALSE(cuda::gemv_norm_fold_pays(4, qwen3_8b_gate_up, true));
  EXPECT_TRUE(cuda::gemv_norm_fold_pays(5, qwen3_8b_gate_up, true));
  EXPECT_TRUE(cuda::gemv_norm_fold_pays(1, qwen3_8b_gate_up, false));
  EXPECT_TRUE(cuda::gemv_norm_fold_pays(1, qwen3_06b_gate_up, true));
  EXPECT_FALSE(cuda::gemv_norm_fold_pays(1, cuda::kGemvFp8UnfoldedMinWeight, true));
  EXPECT_TRUE(cuda::gemv_norm_fold_pays(1, cuda::kGemvFp8UnfoldedMinWeight - 1, true));
}

// Where the fold is not offered: more than 32 rows (16 for FP8 codes or a weight of kGemvMaxWideWeight), 1-4 rows of
// large FP8 weights, a width not a multiple of 8 or above the widest, other weight dtypes, the CPU. Sums of the wrong
// shape, misaligned or overlapping the stale sums are refused before anything is written.
TEST_F(FoldedNormTest, SupportLimits) {
  const int64_t small = int64_t{6} << 20, wide = cuda::kGemvMaxWideWeight;  // Qwen3-0.6B's gate_up: 6 M elements
  EXPECT_TRUE(gpu().supports_norm_fold(32, 1024, DType::BF16, small));
  EXPECT_FALSE(gpu().supports_norm_fold(33, 1024, DType::BF16, small));
  EXPECT_FALSE(gpu().supports_norm_fold(17, 1024, DType::BF16, wide));
  EXPECT_TRUE(gpu().supports_norm_fold(16, 1024, DType::BF16, wide));
  EXPECT_FALSE(gpu().supports_norm_fold(17, 1024, DType::F8_E4M3, small));
  EXPECT_FALSE(gpu().supports_norm_fold(0, 1024, DType::BF16, small));
  EXPECT_TRUE(gpu().supports_norm_fold(16, 4096, DType::BF16, wide));
  EXPECT_TRUE(gpu().supports_norm_fold(16, 1024, DType::F8_E4M3, small));
  EXPECT_TRUE(gpu().supports_norm_fold(16, 4096, DType::F8_E4M3, wide));
  // FP8 codes of large weights fold from 5 rows (gemv_norm_fold_pays), small ones and bf16 from 1.
  EXPECT_FALSE(gpu().supports_norm_fold(1, 4096, DType::F8_E4M3, wide));
  EXPECT_FALSE(gpu().supports_norm_fold(4, 4096, DType::F8_E4M3, wide));
  EXPECT_TRUE(gpu().supports_norm_fold(5, 4096, DType::F8_E4M3, wide));
  EXPECT_TRUE(gpu().supports_norm_fold(1, 1024, DType::F8_E4M3, small));
  EXPECT_TRUE(gpu().supports_norm_fold(1, 4096, DType::BF16, wide));
  EXPECT_TRUE(gpu().supports_norm_fold(1, 16384, DType::BF16, wide));
  EXPECT_FALSE(gpu().supports_norm_fold(1, 16392, DType::BF16, wide));
  EXPECT_FALSE(gpu().supports_norm_fold(1, 1004, DType::BF16, small));
  EXPECT_FALSE(gpu().supports_norm_fold(1, 1024, DType::F16, small));
  EXPECT_FALSE(cpu().supports_norm_fold(1, 1024, DType::F32, small));

  const int hidden = 64;
  const Weight w = make_weight(hidden, hidden, false);
  const Tensor norm_weight = gpu_bf16(random_bf16_values(rng_, hidden), {hidden});
  const Tensor x = gpu_bf16(random_bf16_values(rng_, 2 * hidden), {2, hidden});
  Tensor residual = gpu_bf16(random_bf16_values(rng_, 2 * hidden), {2, hidden});
  Tensor out = gpu_empty(DType::BF16, {2, hidden});
  Tensor slots = zero_sums(4), no_stale;
  Tensor one_row = slots.rows(0, 1), two_rows = slots.rows(0, 2), overlapping = slots.rows(1, 2);
  EXPECT_THROW(gpu().linear_add_folded_norm(x, w.weight, Tensor(), residual, norm_weight, one_row, no_stale, out),
               EngineError);
  EXPECT_THROW(gpu().linear_add_folded_norm(x, w.weight, Tensor(), residual, norm_weight, two_rows, overlapping, out),
               EngineError);
  Tensor misaligned(static_cast<char*>(slots.data) + 16, DType::I64, {2, gpu().folded_norm_sum_words()});
  EXPECT_THROW(gpu().linear_add_folded_norm(x, w.weight, Tensor(), residual, norm_weight, misaligned, no_stale, out),
               EngineError);
  EXPECT_THROW(gpu().linear_folded_norm_input(x, w.weight, Tensor(), Tensor(), {one_row, 1e-6f}, out), EngineError);
  for (const float v : read_gpu(out)) ASSERT_TRUE(std::isnan(v)) << "a refused call wrote its output";
  for (const int64_t v : read_words(slots)) ASSERT_EQ(v, 0) << "a refused call wrote the sums";
}

}  // namespace
}  // namespace nanovllm::test
