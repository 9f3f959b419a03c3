// linear_fp8: the CPU reference must be exactly linear() over the dequantised weight (each element its code's
// value times its 128 x 128 block's scale), on both paths (streaming up to 8 tokens, sgemm beyond) and at
// shapes whose last blocks are partial.
#include "test_helpers.h"

#include <algorithm>
#include <bit>

#include "common/fp8.h"

namespace nanovllm {
namespace {

using test::make_tensor;
using test::OwnedTensor;
using test::poisoned_f32;
using test::random_f32;

int64_t blocks(int64_t size) { return (size + kFp8BlockSize - 1) / kFp8BlockSize; }

struct Fp8Weight {
  OwnedTensor codes;        // F8_E4M3 [n, k]
  OwnedTensor scales;       // F32 [blocks(n), blocks(k)]
  OwnedTensor dequantized;  // F32 [n, k]
};

// Random finite codes (no NaN code) and random positive scales spanning a few binades.
Fp8Weight random_fp8_weight(CpuBackend& backend, int64_t n, int64_t k, std::mt19937& rng) {
  Fp8Weight w{make_tensor(backend, DType::F8_E4M3, {n, k}), make_tensor(backend, DType::F32, {blocks(n), blocks(k)}),
              make_tensor(backend, DType::F32, {n, k})};
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> exponent(-12.0f, -4.0f);
  auto* codes = w.codes.tensor.as<uint8_t>();
  for (int64_t i = 0; i < n * k; ++i) {
    int c = code(rng);
    while ((c & 0x7f) == 0x7f) c = code(rng);
    codes[i] = static_cast<uint8_t>(c);
  }
  for (int64_t i = 0; i < w.scales.numel(); ++i) w.scales.f32()[i] = std::exp2(exponent(rng));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      w.dequantized.f32()[r * k + c] =
          fp8_e4m3_to_float(codes[r * k + c]) * w.scales.f32()[(r / kFp8BlockSize) * blocks(k) + c / kFp8BlockSize];
  return w;
}

class LinearFp8Shapes : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, bool>> {};

TEST_P(LinearFp8Shapes, EqualsLinearOnTheDequantisedWeightBitForBit) {
  const auto [tokens, n, k, with_bias] = GetParam();
  CpuBackend backend;
  std::mt19937 rng(static_cast<unsigned>(tokens * 7 + n * 3 + k + with_bias));
  const Fp8Weight w = random_fp8_weight(backend, n, k, rng);
  auto x = random_f32(backend, {tokens, k}, rng);
  OwnedTensor bias;
  if (with_bias) bias = random_f32(backend, {n}, rng);
  auto want = poisoned_f32(backend, {tokens, n});
  auto got = poisoned_f32(backend, {tokens, n});
  backend.linear(x.tensor, w.dequantized.tensor, bias.tensor, want.tensor);
  backend.linear_fp8(x.tensor, w.codes.tensor, w.scales.tensor, bias.tensor, got.tensor);
  int nonzero = 0;
  for (int64_t i = 0; i < tokens * n; ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got.f32()[i]), std::bit_cast<uint32_t>(want.f32()[i]))
        << "element " << i << ": " << got.f32()[i] << " vs " << want.f32()[i];
    nonzero += got.f32()[i] != 0.0f;
  }
  EXPECT_GT(nonzero, tokens * n / 2);  // the inputs really reach the outputs
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearFp8Shapes,
                         ::testing::Combine(::testing::Values(1, 3, 8, 9, 40), ::testing::Values(200, 256, 33),
                                            ::testing::Values(300, 128, 7), ::testing::Bool()));

TEST(CpuBackendLinearFp8, ScalesApplyPerBlock) {
  // One code everywhere; each block's scale shows in the outputs of its own rows and columns only.
  CpuBackend backend;
  const int64_t n = 130, k = 260;
  auto codes = make_tensor(backend, DType::F8_E4M3, {n, k});
  std::fill_n(codes.tensor.as<uint8_t>(), n * k, float_to_fp8_e4m3(1.0f));
  auto scales = make_tensor(backend, DType::F32, {2, 3});
  const float block_scale[6] = {1, 2, 4, 8, 16, 32};
  std::copy_n(block_scale, 6, scales.f32());
  auto x = make_tensor(backend, DType::F32, {1, k});
  std::fill_n(x.f32(), k, 1.0f);
  auto out = poisoned_f32(backend, {1, n});
  backend.linear_fp8(x.tensor, codes.tensor, scales.tensor, Tensor(), out.tensor);
  EXPECT_EQ(out.f32()[0], 128 * 1 + 128 * 2 + 4 * 4);
  EXPECT_EQ(out.f32()[129], 128 * 8 + 128 * 16 + 4 * 32);
}

TEST(CpuBackendLinearFp8, RejectsAScaleOfTheWrongShape) {
  CpuBackend backend;
  std::mt19937 rng(5);
  const Fp8Weight w = random_fp8_weight(backend, 200, 300, rng);
  auto x = random_f32(backend, {2, 300}, rng);
  auto out = poisoned_f32(backend, {2, 200});
  auto wrong = make_tensor(backend, DType::F32, {2, 2});
  EXPECT_THROW(backend.linear_fp8(x.tensor, w.codes.tensor, wrong.tensor, Tensor(), out.tensor), EngineError);
  EXPECT_THROW(backend.linear_fp8(x.tensor, w.dequantized.tensor, w.scales.tensor, Tensor(), out.tensor), EngineError);
}

}  // namespace
}  // namespace nanovllm
