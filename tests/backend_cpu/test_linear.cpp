// linear: out = x · Wᵀ + b against a double-precision reference, on both of its paths (the streaming kernel
// for up to 8 tokens, sgemm beyond) and at sizes that leave vector and tile remainders.
#include "test_helpers.h"

namespace nanovllm {
namespace {

using test::expect_close;
using test::poisoned_f32;
using test::random_f32;

class LinearShapes : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, bool>> {};

TEST_P(LinearShapes, MatchesReference) {
  const auto [tokens, n, k, with_bias] = GetParam();
  CpuBackend backend;
  std::mt19937 rng(static_cast<unsigned>(tokens * 131 + n * 17 + k + with_bias));
  auto x = random_f32(backend, {tokens, k}, rng);
  auto w = random_f32(backend, {n, k}, rng);
  test::OwnedTensor bias;
  if (with_bias) bias = random_f32(backend, {n}, rng);
  auto out = poisoned_f32(backend, {tokens, n});
  backend.linear(x.tensor, w.tensor, bias.tensor, out.tensor);

  std::vector<double> want(tokens * n), scale(tokens * n);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = with_bias ? bias.f32()[j] : 0.0;
      double magnitude = with_bias ? std::fabs(bias.f32()[j]) : 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const double term = static_cast<double>(x.f32()[t * k + i]) * w.f32()[j * k + i];
        sum += term;
        magnitude += std::fabs(term);
      }
      want[t * n + j] = sum;
      scale[t * n + j] = magnitude;
    }
  }
  expect_close(out.f32(), want, scale, 1e-5, "linear");
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearShapes,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 8, 9, 17, 33),
                                            ::testing::Values(1, 7, 48, 97), ::testing::Values(1, 5, 48, 96, 1031),
                                            ::testing::Bool()));

TEST(CpuBackendLinear, Qwen3ShapeDecodeAndPrefill) {
  CpuBackend backend;
  std::mt19937 rng(11);
  const int64_t n = 3072, k = 1024;
  auto w = random_f32(backend, {n, k}, rng);
  for (int64_t tokens : {1, 4, 33}) {
    auto x = random_f32(backend, {tokens, k}, rng);
    auto out = poisoned_f32(backend, {tokens, n});
    backend.linear(x.tensor, w.tensor, Tensor(), out.tensor);
    std::vector<double> want(tokens * n), scale(tokens * n);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double term = static_cast<double>(x.f32()[t * k + i]) * w.f32()[j * k + i];
          sum += term;
          magnitude += std::fabs(term);
        }
        want[t * n + j] = sum;
        scale[t * n + j] = magnitude;
      }
    expect_close(out.f32(), want, scale, 1e-5, "linear 3072x1024");
  }
}

TEST(CpuBackendLinear, DecodeSizedBatchesGiveEachTokenTheSameBits) {
  // Up to 8 tokens every output element is summed in the same order whatever the batch, so a decode token's
  // result does not depend on which other sequences share its step.
  CpuBackend backend;
  std::mt19937 rng(13);
  const int64_t n = 97, k = 1031;
  auto w = random_f32(backend, {n, k}, rng);
  auto bias = random_f32(backend, {n}, rng);
  auto x = random_f32(backend, {8, k}, rng);
  auto batched = poisoned_f32(backend, {8, n});
  backend.linear(x.tensor, w.tensor, bias.tensor, batched.tensor);
  for (int64_t size : {1, 3, 5}) {
    for (int64_t first = 0; first + size <= 8; first += size) {
      auto part = poisoned_f32(backend, {size, n});
      backend.linear(x.tensor.rows(first, size), w.tensor, bias.tensor, part.tensor);
      for (int64_t i = 0; i < size * n; ++i) ASSERT_EQ(part.f32()[i], batched.f32()[first * n + i]) << size << " " << i;
    }
  }
}

TEST(CpuBackendLinear, RejectsMismatchedShapes) {
  CpuBackend backend;
  std::mt19937 rng(12);
  auto x = random_f32(backend, {3, 48}, rng);
  auto w = random_f32(backend, {7, 47}, rng);
  auto out = poisoned_f32(backend, {3, 7});
  EXPECT_THROW(backend.linear(x.tensor, w.tensor, Tensor(), out.tensor), EngineError);
}

}  // namespace
}  // namespace nanovllm
