// rms_norm and add_rms_norm against a double-precision reference.
#include "test_helpers.h"

namespace nanovllm {
namespace {

using test::expect_close;
using test::poisoned_f32;
using test::random_f32;

// y = x / sqrt(mean(x²) + eps) * w, in double; scale = |x / rms| * |w| for the tolerance.
void reference_rms_norm(const float* x, const float* w, int64_t rows, int64_t hidden, double eps,
                        std::vector<double>& want, std::vector<double>& scale) {
  want.assign(rows * hidden, 0.0);
  scale.assign(rows * hidden, 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    double sum = 0;
    for (int64_t i = 0; i < hidden; ++i) sum += static_cast<double>(x[t * hidden + i]) * x[t * hidden + i];
    const double inv = 1.0 / std::sqrt(sum / hidden + eps);
    for (int64_t i = 0; i < hidden; ++i) {
      want[t * hidden + i] = x[t * hidden + i] * inv * w[i];
      scale[t * hidden + i] = std::fabs(want[t * hidden + i]) + 1e-30;
    }
  }
}

class NormShapes : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(NormShapes, RmsNormMatchesReference) {
  const auto [rows, hidden] = GetParam();
  CpuBackend backend;
  std::mt19937 rng(static_cast<unsigned>(rows * 1000 + hidden));
  auto x = random_f32(backend, {rows, hidden}, rng, -3.0f, 3.0f);
  auto w = random_f32(backend, {hidden}, rng, 0.5f, 2.0f);
  auto out = poisoned_f32(backend, {rows, hidden});
  const float eps = 1e-6f;
  backend.rms_norm(x.tensor, w.tensor, eps, out.tensor);
  std::vector<double> want, scale;
  reference_rms_norm(x.f32(), w.f32(), rows, hidden, eps, want, scale);
  expect_close(out.f32(), want, scale, 1e-5, "rms_norm");

  // In place (out aliases x) gives the same numbers.
  backend.rms_norm(x.tensor, w.tensor, eps, x.tensor);
  expect_close(x.f32(), want, scale, 1e-5, "rms_norm in place");
}

TEST_P(NormShapes, AddRmsNormUpdatesResidualAndNormalises) {
  const auto [rows, hidden] = GetParam();
  CpuBackend backend;
  std::mt19937 rng(static_cast<unsigned>(rows * 7 + hidden));
  auto x = random_f32(backend, {rows, hidden}, rng, -2.0f, 2.0f);
  auto residual = random_f32(backend, {rows, hidden}, rng, -2.0f, 2.0f);
  auto w = random_f32(backend, {hidden}, rng, -1.5f, 1.5f);
  auto out = poisoned_f32(backend, {rows, hidden});
  std::vector<float> sum(rows * hidden);
  std::vector<double> sum_d(rows * hidden), sum_scale(rows * hidden);
  for (int64_t i = 0; i < rows * hidden; ++i) {
    sum[i] = x.f32()[i] + residual.f32()[i];  // the fp32 sum is the residual stream's value
    sum_d[i] = static_cast<double>(x.f32()[i]) + residual.f32()[i];
    sum_scale[i] = std::fabs(x.f32()[i]) + std::fabs(residual.f32()[i]);
  }
  const float eps = 1e-5f;
  backend.add_rms_norm(x.tensor, residual.tensor, w.tensor, eps, out.tensor);
  expect_close(residual.f32(), sum_d, sum_scale, 1e-6, "residual");
  std::vector<double> want, scale;
  reference_rms_norm(sum.data(), w.f32(), rows, hidden, eps, want, scale);
  expect_close(out.f32(), want, scale, 1e-5, "add_rms_norm");
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormShapes,
                         ::testing::Combine(::testing::Values(1, 3, 17, 33), ::testing::Values(48, 96, 1024)));

TEST(CpuBackendNorm, AddRmsNormWithOutAliasingX) {
  CpuBackend backend;
  std::mt19937 rng(9);
  const int64_t rows = 17, hidden = 96;
  auto x = random_f32(backend, {rows, hidden}, rng);
  auto residual = random_f32(backend, {rows, hidden}, rng);
  auto w = random_f32(backend, {hidden}, rng);
  auto x_copy = x.to_vector();
  auto residual_copy = residual.to_vector();
  auto out = poisoned_f32(backend, {rows, hidden});
  backend.add_rms_norm(x.tensor, residual.tensor, w.tensor, 1e-6f, out.tensor);
  auto separate = out.to_vector();
  std::copy(residual_copy.begin(), residual_copy.end(), residual.f32());
  backend.add_rms_norm(x.tensor, residual.tensor, w.tensor, 1e-6f, x.tensor);
  for (int64_t i = 0; i < rows * hidden; ++i) ASSERT_EQ(x.f32()[i], separate[i]) << i;
  (void)x_copy;
}

TEST(CpuBackendNorm, RejectsMismatchedWeight) {
  CpuBackend backend;
  std::mt19937 rng(4);
  auto x = random_f32(backend, {3, 48}, rng);
  auto w = random_f32(backend, {47}, rng);
  auto out = poisoned_f32(backend, {3, 48});
  EXPECT_THROW(backend.rms_norm(x.tensor, w.tensor, 1e-6f, out.tensor), EngineError);
}

}  // namespace
}  // namespace nanovllm
