// The block-scaled FP8 path of linear_fp8 above 16 rows (activations quantised per token and 128-wide K group,
// cuBLASLt's block-scaled FP8 GEMM; fp8_block_gemm.h) and its activation quantiser.
// - Quantiser: launch_quantize_fp8_activations against quantize_fp8_activations (common/fp8_activation.h) bit for
//   bit, codes and scales; the kernel's scales are group-major [ceil(K / 128), M].
// - GEMM against the same math on the CPU: the CPU's linear_fp8 over the activations quantised on the CPU and
//   dequantised (code * scale, one fp32 multiply). Only summation order and the output's bf16 rounding (alone
//   ~1.1e-3 relative L2) differ: relative L2 <= 4e-3, on 16 rows spread over M (the CPU's share stays short).
// - GEMM against the dequantise path (bf16 activations) on every row: the activations' E4M3 rounding (up to 2^-4
//   relative, ~2.5% RMS) bounds the difference: relative L2 <= 5e-2.
// - Rows past the last multiple of 4 (M = 17, 1003; cuBLASLt takes multiples of 4 only) go to the FP8 GEMV: their
//   reference is the unquantised activations.
// Qwen3-0.6B's and Qwen3-8B's projections at M = 17, 64, 256, 1000, 1003 must take the block-scaled path; the odd
// shapes (N and K inside a scale block, ceil(K / 128) not a multiple of 4: cuBLASLt's padded weight scales) are checked
// on whichever path cuBLASLt lets them take, and shapes it cannot take fall back to the dequantise path.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <set>
#include <string>

#include "backend/cuda/kernels.h"
#include "common/fp8.h"
#include "common/fp8_activation.h"
#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {
namespace {

constexpr double kSameMathTolerance = 4e-3;
constexpr double kVsDequantizeTolerance = 5e-2;
constexpr double kDequantizePathTolerance = 1e-2;  // the dequantise path against the CPU (test_linear_fp8.cpp)

float round_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

// x [rows, k] as the block-scaled path multiplies it: each row quantised per 128-wide group and dequantised (code *
// scale, one fp32 multiply), except the rows `as_is(row)` names (those the GEMV takes), which stay as they are.
template <class AsIs>
std::vector<float> w8a8_activations(std::vector<float> x, int rows, int k, const AsIs& as_is) {
  const int64_t groups = fp8_blocks(k);
  std::vector<uint8_t> codes(x.size());
  std::vector<float> scales(static_cast<size_t>(rows * groups));
  quantize_fp8_activations(x.data(), rows, k, codes.data(), scales.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t row = static_cast<int64_t>(i) / k, col = static_cast<int64_t>(i) % k;
    if (!as_is(static_cast<int>(row))) x[i] = fp8_e4m3_to_float(codes[i]) * scales[row * groups + col / 128];
  }
  return x;
}

// bf16 activations whose magnitude varies by group (1e-3..1e3) and within a group (a factor up to 2^12, so
// some codes are E4M3 subnormals); never zero.
std::vector<float> varied_activations(std::mt19937& rng, int m, int k) {
  std::uniform_real_distribution<float> group_exp(-3.0f, 3.0f), element_exp(-12.0f, 0.0f);
  std::vector<float> x = random_bf16_values(rng, int64_t{m} * k);
  for (int r = 0; r < m; ++r) {
    for (int g = 0; g * 128 < k; ++g) {
      const float magnitude = std::pow(10.0f, group_exp(rng));
      for (int c = g * 128; c < std::min(k, g * 128 + 128); ++c) {
        float& v = x[static_cast<size_t>(r) * k + c];
        v = round_bf16(v * magnitude * std::exp2(element_exp(rng)));
      }
    }
  }
  return x;
}

// --- quantiser ---

struct QuantCase {
  int m, k;
};

class Fp8ActivationQuantTest : public CudaOpsTest, public ::testing::WithParamInterface<QuantCase> {};

TEST_P(Fp8ActivationQuantTest, MatchesTheCpuBitForBit) {
  const auto [m, k] = GetParam();
  const int64_t groups = fp8_blocks(k);
  std::vector<float> x = varied_activations(rng_, m, k);
  // One group of zeros (its scale is 1, its codes 0) where there is more than one group to keep random.
  if (m * groups > 1) std::fill(x.begin(), x.begin() + std::min(k, 128), 0.0f);
  std::vector<uint8_t> want_codes(x.size());
  std::vector<float> want_scales(static_cast<size_t>(m * groups));
  quantize_fp8_activations(x.data(), m, k, want_codes.data(), want_scales.data());

  Tensor gx = gpu_bf16(x, {m, k});
  Tensor codes = gpu_empty(DType::F8_E4M3, {m, k});
  Tensor scales = gpu_empty(DType::F32, {groups, m});
  cuda::launch_quantize_fp8_activations(gx.as<__nv_bfloat16>(), codes.as<uint8_t>(), scales.as<float>(), m, k,
                                        gpu().stream());
  const std::vector<uint8_t> got_codes = read_gpu_bytes(codes);
  const std::vector<float> got_scales = read_gpu(scales);
  int64_t bad_codes = 0, bad_scales = 0;
  for (size_t i = 0; i < want_codes.size(); ++i) {
    if (got_codes[i] != want_codes[i] && bad_codes++ < 5)
      ADD_FAILURE() << "code " << i << " (row " << i / k << ", col " << i % k << ", x " << x[i] << "): got 0x"
                    << std::hex << int{got_codes[i]} << ", want 0x" << int{want_codes[i]} << std::dec;
  }
  for (int r = 0; r < m; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float got = got_scales[static_cast<size_t>(g * m + r)],
                  want = want_scales[static_cast<size_t>(r * groups + g)];
      if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want) && bad_scales++ < 5)
        ADD_FAILURE() << "scale of row " << r << ", group " << g << ": got " << got << ", want " << want;
    }
  }
  EXPECT_EQ(bad_codes, 0) << "codes differing, M=" << m << " K=" << k;
  EXPECT_EQ(bad_scales, 0) << "scales differing, M=" << m << " K=" << k;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8ActivationQuantTest,
                         ::testing::Values(QuantCase{1, 128}, QuantCase{17, 1024}, QuantCase{17, 304},
                                           QuantCase{333, 3072}, QuantCase{64, 144}, QuantCase{5, 16},
                                           QuantCase{1000, 4096}, QuantCase{3, 12288}),
                         [](const ::testing::TestParamInfo<QuantCase>& info) {
                           // Appended piecewise: "M" + std::to_string(...) trips GCC 12's -Wrestrict.
                           std::string name = "M";
                           name += std::to_string(info.param.m);
                           name += "_K";
                           name += std::to_string(info.param.k);
                           return name;
                         });

// --- GEMM ---

struct GemmCase {
  std::string name;
  int m, n, k;
  bool must_take_block_path;  // a Qwen3 projection: cuBLASLt refusing it is a failure, not a fallback
};

class Fp8BlockGemmTest : public CudaOpsTest, public ::testing::WithParamInterface<GemmCase> {};

// Rows 0-3, four around a third and around half of M, and the last four.
std::vector<int> sampled_rows(int m) {
  std::set<int> rows;
  for (int base : {0, m / 3, m / 2, m - 4}) {
    for (int i = 0; i < 4; ++i) {
      if (base + i >= 0 && base + i < m) rows.insert(base + i);
    }
  }
  return {rows.begin(), rows.end()};
}

std::vector<float> pick_rows(const std::vector<float>& v, const std::vector<int>& rows, int width) {
  std::vector<float> out;
  for (int r : rows) out.insert(out.end(), v.begin() + int64_t{r} * width, v.begin() + int64_t{r + 1} * width);
  return out;
}

TEST_P(Fp8BlockGemmTest, MatchesTheSameMathOnTheCpuAndTheDequantizePath) {
  const GemmCase c = GetParam();
  const int64_t sn = fp8_blocks(c.n), sk = fp8_blocks(c.k);
  const auto x = random_bf16_values(rng_, int64_t{c.m} * c.k);
  const auto codes = random_fp8_codes(rng_, int64_t{c.n} * c.k);
  const auto scales = random_fp8_scales(rng_, sn * sk);
  gpu().reserve_fp8_linear(c.n, c.k);
  gpu().set_fp8_gemm_path(Fp8LinearPath::kBlockScaled);
  const Tensor gx = gpu_bf16(x, {c.m, c.k});
  const Tensor weight = gpu_raw(codes, DType::F8_E4M3, {c.n, c.k});
  const Tensor block_scale = gpu_raw(scales, DType::F32, {sn, sk});
  gpu().prepare_fp8_linear(weight, block_scale);
  Tensor out = gpu_empty(DType::BF16, {c.m, c.n});
  gpu().linear_fp8(gx, weight, block_scale, Tensor(), out);
  const Fp8LinearPath path = gpu().last_fp8_linear_path();
  const std::vector<float> got = read_gpu(out);
  if (c.must_take_block_path) {
    ASSERT_EQ(path, Fp8LinearPath::kBlockScaled) << c.name << ": cuBLASLt refused the block-scaled FP8 GEMM";
  } else if (path != Fp8LinearPath::kBlockScaled) {
    std::printf("note: %s M=%d fell back to the dequantise path\n", c.name.c_str(), c.m);
  }
  const bool block = path == Fp8LinearPath::kBlockScaled;

  // The CPU reference on the sampled rows: on the block path the quantised-and-dequantised activations, except
  // the rows past the last multiple of 4, which the GEMV multiplies as they are.
  const std::vector<int> rows = sampled_rows(c.m);
  const int r = static_cast<int>(rows.size());
  std::vector<float> x_rows = pick_rows(x, rows, c.k);
  if (block) x_rows = w8a8_activations(x_rows, r, c.k, [&](int i) { return rows[i] >= (c.m & ~3); });
  Tensor cpu_out = cpu_empty(DType::F32, {r, c.n});
  cpu().linear_fp8(cpu_f32(x_rows, {r, c.k}), cpu_raw(codes, DType::F8_E4M3, {c.n, c.k}),
                   cpu_raw(scales, DType::F32, {sn, sk}), Tensor(), cpu_out);
  const std::string what = c.name + " M=" + std::to_string(c.m);
  expect_rel_l2(pick_rows(got, rows, c.n), read_cpu(cpu_out), block ? kSameMathTolerance : kDequantizePathTolerance,
                what + " against the CPU");
  if (!block) return;

  gpu().linear_fp8(gx, weight, block_scale, Tensor(), out);
  EXPECT_EQ(read_gpu(out), got) << what << ": not deterministic";
  gpu().set_fp8_gemm_path(Fp8LinearPath::kDequantize);
  gpu().linear_fp8(gx, weight, block_scale, Tensor(), out);
  ASSERT_EQ(gpu().last_fp8_linear_path(), Fp8LinearPath::kDequantize);
  expect_rel_l2(got, read_gpu(out), kVsDequantizeTolerance, what + " against the dequantise path");
}

std::vector<GemmCase> gemm_cases() {
  struct Shape {
    const char* name;
    int n, k;
    bool qwen;
  };
  const Shape shapes[] = {
      {"q06_qkv", 4096, 1024, true},
      {"q06_o", 1024, 2048, true},
      {"q06_gate_up", 6144, 1024, true},
      {"q06_down", 1024, 3072, true},
      {"q8_qkv", 6144, 4096, true},
      {"q8_o", 4096, 4096, true},
      {"q8_gate_up", 24576, 4096, true},
      {"q8_down", 4096, 12288, true},
      // K ending inside a group, ceil(K / 128) = 3 and 5: padded weight scales; N inside a scale block.
      {"partial_k", 256, 304, false},
      {"partial_n_k", 200, 528, false},
      {"odd_n", 701, 512, false},
  };
  std::vector<GemmCase> cases;
  for (const Shape& s : shapes) {
    for (int m : {17, 64, 256, 1000, 1003}) cases.push_back({s.name, m, s.n, s.k, s.qwen});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8BlockGemmTest, ::testing::ValuesIn(gemm_cases()),
                         [](const ::testing::TestParamInfo<GemmCase>& info) {
                           return info.param.name + "_M" + std::to_string(info.param.m);
                         });

// Shapes the block-scaled path cannot take go to the dequantise path, with its accuracy: K not a multiple of 16,
// an fp32 output, padded scales never prepared (prepare_fp8_linear), more rows than the activation scratch holds.
TEST_F(CudaOpsTest, Fp8BlockScaledPathFallsBackToDequantize) {
  struct Case {
    const char* name;
    int m, n, k;
    DType out;
    bool prepare;
  };
  const Case cases[] = {{"k_not_multiple_of_16", 40, 256, 136, DType::BF16, true},
                        {"f32_out", 40, 256, 256, DType::F32, true},
                        {"scales_not_prepared", 40, 256, 304, DType::BF16, false},
                        {"beyond_scratch_rows", 4097, 128, 128, DType::BF16, true}};
  gpu().set_fp8_gemm_path(Fp8LinearPath::kBlockScaled);
  for (const Case& c : cases) {
    const int64_t sn = fp8_blocks(c.n), sk = fp8_blocks(c.k);
    const auto x = random_bf16_values(rng_, int64_t{c.m} * c.k);
    const auto codes = random_fp8_codes(rng_, int64_t{c.n} * c.k);
    const auto scales = random_fp8_scales(rng_, sn * sk);
    gpu().reserve_fp8_linear(c.n, c.k);
    const Tensor weight = gpu_raw(codes, DType::F8_E4M3, {c.n, c.k});
    const Tensor block_scale = gpu_raw(scales, DType::F32, {sn, sk});
    if (c.prepare) gpu().prepare_fp8_linear(weight, block_scale);
    Tensor out = gpu_empty(c.out, {c.m, c.n});
    gpu().linear_fp8(gpu_bf16(x, {c.m, c.k}), weight, block_scale, Tensor(), out);
    EXPECT_EQ(gpu().last_fp8_linear_path(), Fp8LinearPath::kDequantize) << c.name;
    Tensor cpu_out = cpu_empty(DType::F32, {c.m, c.n});
    cpu().linear_fp8(cpu_f32(x, {c.m, c.k}), cpu_raw(codes, DType::F8_E4M3, {c.n, c.k}),
                     cpu_raw(scales, DType::F32, {sn, sk}), Tensor(), cpu_out);
    expect_rel_l2(read_gpu(out), read_cpu(cpu_out), kDequantizePathTolerance, c.name);
  }
}

// A bias: cuBLASLt's epilogue on the block-scaled GEMM, or the dequantise path where it refuses; either way the
// bias is added.
TEST_F(CudaOpsTest, Fp8BlockScaledPathAddsTheBias) {
  const int m = 48, n = 384, k = 256;
  const auto x = random_bf16_values(rng_, int64_t{m} * k);
  const auto codes = random_fp8_codes(rng_, int64_t{n} * k);
  const auto scales = random_fp8_scales(rng_, fp8_blocks(n) * fp8_blocks(k));
  const auto b = random_bf16_values(rng_, n);
  gpu().reserve_fp8_linear(n, k);
  gpu().set_fp8_gemm_path(Fp8LinearPath::kBlockScaled);
  const Tensor weight = gpu_raw(codes, DType::F8_E4M3, {n, k});
  const Tensor block_scale = gpu_raw(scales, DType::F32, {fp8_blocks(n), fp8_blocks(k)});
  Tensor out = gpu_empty(DType::BF16, {m, n});
  gpu().linear_fp8(gpu_bf16(x, {m, k}), weight, block_scale, gpu_bf16(b, {n}), out);
  const bool block = gpu().last_fp8_linear_path() == Fp8LinearPath::kBlockScaled;
  std::printf("note: bias took the %s path\n", block ? "block-scaled" : "dequantise");
  const std::vector<float> x_ref = block ? w8a8_activations(x, m, k, [](int) { return false; }) : x;
  Tensor cpu_out = cpu_empty(DType::F32, {m, n});
  cpu().linear_fp8(cpu_f32(x_ref, {m, k}), cpu_raw(codes, DType::F8_E4M3, {n, k}),
                   cpu_raw(scales, DType::F32, {fp8_blocks(n), fp8_blocks(k)}), cpu_f32(b, {n}), cpu_out);
  expect_rel_l2(read_gpu(out), read_cpu(cpu_out), block ? kSameMathTolerance : kDequantizePathTolerance, "bias");
}

// kAuto, the default setting: the block-scaled GEMM for weights of kBlockScaledMinWeight elements and more (where
// it measured faster), the dequantise path below.
TEST_F(CudaOpsTest, Fp8AutoPathTakesTheBlockScaledGemmForLargeWeights) {
  struct Case {
    int n, k;
    Fp8LinearPath want;
  };
  const Case cases[] = {{1024, 2048, Fp8LinearPath::kDequantize},    // Qwen3-0.6B's o_proj, 2 M elements
                        {1024, 3072, Fp8LinearPath::kDequantize},    // its down_proj, 3 M
                        {4096, 1024, Fp8LinearPath::kBlockScaled},   // its qkv, 4 M: the threshold
                        {6144, 1024, Fp8LinearPath::kBlockScaled}};  // its gate_up
  const int m = 40;
  gpu().set_fp8_gemm_path(Fp8LinearPath::kAuto);
  for (const Case& c : cases) {
    ASSERT_EQ(int64_t{c.n} * c.k >= kBlockScaledMinWeight, c.want == Fp8LinearPath::kBlockScaled);
    const int64_t sn = fp8_blocks(c.n), sk = fp8_blocks(c.k);
    gpu().reserve_fp8_linear(c.n, c.k);
    const Tensor weight = gpu_raw(random_fp8_codes(rng_, int64_t{c.n} * c.k), DType::F8_E4M3, {c.n, c.k});
    const Tensor block_scale = gpu_raw(random_fp8_scales(rng_, sn * sk), DType::F32, {sn, sk});
    gpu().prepare_fp8_linear(weight, block_scale);
    Tensor out = gpu_empty(DType::BF16, {m, c.n});
    gpu().linear_fp8(gpu_bf16(random_bf16_values(rng_, int64_t{m} * c.k), {m, c.k}), weight, block_scale, Tensor(),
                     out);
    EXPECT_EQ(gpu().last_fp8_linear_path(), c.want) << c.n << " x " << c.k;
  }
}

// The engine captures large decode batches in CUDA graphs: the path (quantiser + cuBLASLt) replays to the same
// result as an eager call.
TEST_F(CudaOpsTest, Fp8BlockScaledPathReplaysInAGraph) {
  const int m = 64, n = 1024, k = 2048;
  const auto x = random_bf16_values(rng_, int64_t{m} * k);
  const auto codes = random_fp8_codes(rng_, int64_t{n} * k);
  const auto scales = random_fp8_scales(rng_, fp8_blocks(n) * fp8_blocks(k));
  gpu().reserve_fp8_linear(n, k);
  gpu().set_fp8_gemm_path(Fp8LinearPath::kBlockScaled);
  const Tensor gx = gpu_bf16(x, {m, k});
  const Tensor weight = gpu_raw(codes, DType::F8_E4M3, {n, k});
  const Tensor block_scale = gpu_raw(scales, DType::F32, {fp8_blocks(n), fp8_blocks(k)});
  Tensor out = gpu_empty(DType::BF16, {m, n});
  gpu().linear_fp8(gx, weight, block_scale, Tensor(), out);
  ASSERT_EQ(gpu().last_fp8_linear_path(), Fp8LinearPath::kBlockScaled);
  const std::vector<float> eager = read_gpu(out);
  Tensor replayed = gpu_empty(DType::BF16, {m, n});
  CudaGraph graph = gpu().capture([&] { gpu().linear_fp8(gx, weight, block_scale, Tensor(), replayed); });
  gpu().replay(graph);
  EXPECT_EQ(read_gpu(replayed), eager);
}

}  // namespace
}  // namespace nanovllm::test
