// silu_and_mul against a double-precision reference, including large |gate| where exp overflows.
#include "test_helpers.h"

namespace nanovllm {
namespace {

TEST(CpuBackendActivation, SiluAndMulMatchesReference) {
  CpuBackend backend;
  std::mt19937 rng(21);
  for (int64_t tokens : {1, 3, 17, 33}) {
    for (int64_t inter : {48, 96, 3072}) {
      auto gate_up = test::random_f32(backend, {tokens, 2 * inter}, rng, -8.0f, 8.0f);
      gate_up.f32()[0] = -200.0f;  // exp(200) overflows float: silu must give -0, not NaN
      gate_up.f32()[1] = 200.0f;
      auto out = test::poisoned_f32(backend, {tokens, inter});
      backend.silu_and_mul(gate_up.tensor, out.tensor);
      std::vector<double> want(tokens * inter), scale(tokens * inter);
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < inter; ++i) {
          const double g = gate_up.f32()[t * 2 * inter + i], u = gate_up.f32()[t * 2 * inter + inter + i];
          want[t * inter + i] = g / (1.0 + std::exp(-g)) * u;
          scale[t * inter + i] = std::fabs(want[t * inter + i]) + 1e-30;
        }
      test::expect_close(out.f32(), want, scale, 1e-5, "silu_and_mul");
    }
  }
}

TEST(CpuBackendActivation, RejectsWrongOutputWidth) {
  CpuBackend backend;
  std::mt19937 rng(22);
  auto gate_up = test::random_f32(backend, {3, 96}, rng);
  auto out = test::poisoned_f32(backend, {3, 96});
  EXPECT_THROW(backend.silu_and_mul(gate_up.tensor, out.tensor), EngineError);
}

}  // namespace
}  // namespace nanovllm
