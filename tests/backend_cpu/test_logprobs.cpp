// logprobs against a double-precision log-softmax; top-k order and ties; rows without a target.
#include <algorithm>
#include <numeric>

#include "test_helpers.h"

namespace nanovllm {
namespace {

using test::OwnedTensor;

TEST(CpuLogprobs, MatchReferenceWithTopK) {
  CpuBackend backend;
  std::mt19937 rng(61);
  for (int64_t vocab : {7, 1000, 151936}) {
    for (int k : {0, 1, 5, 20}) {
      if (k > vocab) continue;
      const int64_t rows = vocab > 100000 ? 3 : 17;
      OwnedTensor logits = test::random_f32(backend, {rows, vocab}, rng, -20.0f, 20.0f);
      // Ties: in row 0, ids 6 and 2 share the largest value (2 must come first), 4 and 5 the next.
      logits.f32()[2] = logits.f32()[6] = 30.0f;
      logits.f32()[4] = logits.f32()[5] = 25.0f;
      std::vector<int32_t> targets(rows);
      for (int64_t r = 0; r < rows; ++r) targets[r] = static_cast<int32_t>(rng() % vocab);
      OwnedTensor targets_t = test::i32_tensor(backend, targets);
      OwnedTensor target_lp = test::poisoned_f32(backend, {rows});
      OwnedTensor top_ids = test::make_tensor(backend, DType::I32, {rows, std::max(k, 1)});
      OwnedTensor top_lp = test::poisoned_f32(backend, {rows, std::max(k, 1)});
      std::fill(top_ids.i32(), top_ids.i32() + top_ids.numel(), -5);
      Tensor ids_view = k > 0 ? top_ids.tensor : Tensor();
      Tensor lp_view = k > 0 ? top_lp.tensor : Tensor();
      backend.logprobs(logits.tensor, targets_t.tensor, k, target_lp.tensor, ids_view, lp_view);

      for (int64_t r = 0; r < rows; ++r) {
        const float* x = logits.f32() + r * vocab;
        double max_x = *std::max_element(x, x + vocab), sum = 0;
        for (int64_t i = 0; i < vocab; ++i) sum += std::exp(x[i] - max_x);
        const double lse = max_x + std::log(sum);
        EXPECT_NEAR(target_lp.f32()[r], x[targets[r]] - lse, 1e-5 * (std::fabs(x[targets[r]]) + std::fabs(lse)))
            << "vocab " << vocab << " row " << r;
        std::vector<int32_t> order(vocab);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [x](int32_t a, int32_t b) { return x[a] > x[b]; });
        for (int j = 0; j < k; ++j) {
          ASSERT_EQ(top_ids.i32()[r * k + j], order[j]) << "vocab " << vocab << " row " << r << " rank " << j;
          EXPECT_NEAR(top_lp.f32()[r * k + j], x[order[j]] - lse, 1e-5 * (std::fabs(x[order[j]]) + std::fabs(lse)));
        }
        if (r == 0 && k >= 4) {
          EXPECT_EQ(top_ids.i32()[0], 2);
          EXPECT_EQ(top_ids.i32()[1], 6);
          EXPECT_EQ(top_ids.i32()[2], 4);
          EXPECT_EQ(top_ids.i32()[3], 5);
        }
      }
      if (k == 0) {
        EXPECT_EQ(top_ids.i32()[0], -5);  // untouched
      }
    }
  }
}

TEST(CpuLogprobs, TargetOutsideTheVocabularyGivesNaN) {
  CpuBackend backend;
  std::mt19937 rng(62);
  OwnedTensor logits = test::random_f32(backend, {3, 10}, rng);
  OwnedTensor targets = test::i32_tensor(backend, {-1, 4, 10});
  OwnedTensor target_lp = test::poisoned_f32(backend, {3});
  Tensor none;
  backend.logprobs(logits.tensor, targets.tensor, 0, target_lp.tensor, none, none);
  EXPECT_TRUE(std::isnan(target_lp.f32()[0]));
  EXPECT_FALSE(std::isnan(target_lp.f32()[1]));
  EXPECT_LT(target_lp.f32()[1], 0.0f);
  EXPECT_TRUE(std::isnan(target_lp.f32()[2]));
}

TEST(CpuLogprobs, RejectsKLargerThanTheVocabulary) {
  CpuBackend backend;
  std::mt19937 rng(63);
  OwnedTensor logits = test::random_f32(backend, {1, 4}, rng);
  OwnedTensor targets = test::i32_tensor(backend, {0});
  OwnedTensor target_lp = test::poisoned_f32(backend, {1});
  OwnedTensor ids = test::make_tensor(backend, DType::I32, {1, 5});
  OwnedTensor lps = test::poisoned_f32(backend, {1, 5});
  EXPECT_THROW(backend.logprobs(logits.tensor, targets.tensor, 5, target_lp.tensor, ids.tensor, lps.tensor),
               EngineError);
}

}  // namespace
}  // namespace nanovllm
