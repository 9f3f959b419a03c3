// logprobs against the CPU backend on fp32 logits: the log-softmax values within 1e-3 absolute (fp32 sums
// of up to 151936 terms against the CPU's double sums: ~1e-6 relative), top ids exactly (lowest id first
// on ties), every requested slot written.
#include <algorithm>
#include <cmath>

#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {
namespace {

class LogprobsTest : public CudaOpsTest {
 protected:
  // Both backends' results for the same logits [rows, vocab] and targets, read back to the host.
  struct Results {
    std::vector<float> gpu_target, cpu_target, gpu_top, cpu_top;
    std::vector<int32_t> gpu_ids, cpu_ids;
  };
  Results run_both(const std::vector<float>& logits, const std::vector<int32_t>& targets, int rows, int64_t vocab,
                   int k) {
    Tensor g_target = gpu_empty(DType::F32, {rows});
    Tensor g_ids = k > 0 ? gpu_empty(DType::I32, {rows, k}) : Tensor();
    Tensor g_top = k > 0 ? gpu_empty(DType::F32, {rows, k}) : Tensor();
    gpu().logprobs(gpu_raw(logits, DType::F32, {rows, vocab}), gpu_raw(targets, DType::I32, {rows}), k, g_target, g_ids,
                   g_top);
    Tensor c_target = cpu_empty(DType::F32, {rows});
    Tensor c_ids = k > 0 ? cpu_empty(DType::I32, {rows, k}) : Tensor();
    Tensor c_top = k > 0 ? cpu_empty(DType::F32, {rows, k}) : Tensor();
    cpu().logprobs(cpu_raw(logits, DType::F32, {rows, vocab}), cpu_raw(targets, DType::I32, {rows}), k, c_target, c_ids,
                   c_top);
    Results r;
    r.gpu_target = read_gpu(g_target);
    r.cpu_target = read_cpu(c_target);
    if (k > 0) {
      r.gpu_ids = read_gpu_i32(g_ids);
      r.cpu_ids.assign(c_ids.as<int32_t>(), c_ids.as<int32_t>() + static_cast<int64_t>(rows) * k);
      r.gpu_top = read_gpu(g_top);
      r.cpu_top = read_cpu(c_top);
    }
    return r;
  }

  void check(int rows, int64_t vocab, int k, bool plant_ties) {
    const std::vector<float> logits = random_logits(rows, vocab, plant_ties);
    const std::vector<int32_t> targets = random_targets(rows, vocab);
    const std::string what =
        "rows " + std::to_string(rows) + " vocab " + std::to_string(vocab) + " k " + std::to_string(k);
    const Results res = run_both(logits, targets, rows, vocab, k);
    check_targets(res, targets, what);
    if (k == 0) return;
    check_top_k(res, rows, vocab, k, plant_ties, what);
  }

  // Normal logits; with `plant_ties`, row 0 gets a three-way tie at the top.
  std::vector<float> random_logits(int rows, int64_t vocab, bool plant_ties) {
    std::normal_distribution<float> dist(0.0f, 4.0f);
    std::vector<float> logits(static_cast<size_t>(rows * vocab));
    for (auto& x : logits) x = dist(rng_);
    if (plant_ties) {
      const float top = *std::max_element(logits.begin(), logits.begin() + vocab) + 1.0f;
      for (int64_t i : {vocab - 1, vocab / 2, int64_t{3}}) logits[i] = top;  // row 0: three-way tie at the top
    }
    return logits;
  }

  // A random target per row, but none for row 2.
  std::vector<int32_t> random_targets(int rows, int64_t vocab) {
    std::vector<int32_t> targets(rows);
    for (auto& t : targets) t = static_cast<int32_t>(rng_() % vocab);
    if (rows > 2) targets[2] = -1;  // a row without a target
    return targets;
  }

  // The target's logprob matches the CPU's; a row without a target gets NaN.
  static void check_targets(const Results& res, const std::vector<int32_t>& targets, const std::string& what) {
    const auto& gt = res.gpu_target;
    const auto& ct = res.cpu_target;
    for (int r = 0; r < static_cast<int>(targets.size()); ++r) {
      if (targets[r] < 0) {
        EXPECT_TRUE(std::isnan(gt[r])) << what << " row " << r;
      } else {
        EXPECT_NEAR(gt[r], ct[r], 1e-3) << what << " row " << r;
      }
    }
  }

  // The top k match the CPU's ids and values, descend, and break the planted tie by lower id.
  static void check_top_k(const Results& res, int rows, int64_t vocab, int k, bool plant_ties,
                          const std::string& what) {
    const auto& gi = res.gpu_ids;
    EXPECT_EQ(gi, res.cpu_ids) << what;
    const auto& gl = res.gpu_top;
    const auto& cl = res.cpu_top;
    for (size_t i = 0; i < gl.size(); ++i) ASSERT_NEAR(gl[i], cl[i], 1e-3) << what << " entry " << i;
    for (int r = 0; r < rows; ++r) {
      for (int j = 1; j < k; ++j) EXPECT_GE(gl[r * k + j - 1], gl[r * k + j]) << what << ": not descending";
    }
    if (plant_ties && k >= 3) {
      EXPECT_EQ(gi[0], 3);
      EXPECT_EQ(gi[1], vocab / 2);
      EXPECT_EQ(gi[2], vocab - 1);
    }
  }
};

TEST_F(LogprobsTest, MatchesCpu) {
  for (int64_t vocab : {int64_t{151936}, int64_t{1003}}) {
    for (int rows : {1, 3, 17}) {
      for (int k : {0, 1, 20}) check(rows, vocab, k, true);
    }
  }
}

TEST_F(LogprobsTest, LargeK) { check(5, 1003, 256, false); }

TEST_F(LogprobsTest, ManyRows) { check(600, 4099, 5, false); }

TEST_F(LogprobsTest, RowCounts) {
  for (int rows : {1, 3, 64, 257, 512}) check(rows, 151936, 20, true);
}

// Odd vocabularies, k equal to the vocabulary, k at the maximum.
TEST_F(LogprobsTest, OddShapes) {
  check(4, 7, 7, false);
  check(3, 151937, 256, true);
  check(2, 1, 1, false);
  check(5, 2053, 20, true);
}

// Ties are ranked by id (the candidate list orders keys by value, then lower id first); masked (-inf)
// logits never appear above real ones.
TEST_F(LogprobsTest, TiesAndMaskedTokens) {
  const int64_t vocab = 151936;
  const int rows = 3, k = 20;
  std::vector<float> logits(rows * vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    logits[i] = 1.0f;                                                                // row 0: all tied
    logits[vocab + i] = static_cast<float>(i % 3);                                   // row 1: three values
    logits[2 * vocab + i] = i % 1000 == 7 ? static_cast<float>(i % 13) : -INFINITY;  // row 2: mostly masked
  }
  std::vector<int32_t> targets = {5, 2, 7};
  const Results res = run_both(logits, targets, rows, vocab, k);
  const auto& gi = res.gpu_ids;
  EXPECT_EQ(gi, res.cpu_ids);
  for (int j = 0; j < k; ++j) EXPECT_EQ(gi[j], j) << "all tied: ids in order";
  for (int j = 0; j < k; ++j) EXPECT_EQ(gi[k + j], 2 + 3 * j) << "three values: the 2s in id order";
  for (size_t i = 0; i < res.gpu_top.size(); ++i) EXPECT_NEAR(res.gpu_top[i], res.cpu_top[i], 1e-3) << "entry " << i;
  for (int r = 0; r < rows; ++r) EXPECT_NEAR(res.gpu_target[r], res.cpu_target[r], 1e-3) << "row " << r;
}

// The candidate list's bound comes from each thread's two largest logits; 100 threads owning only large,
// spread-out logits (and everything else small) put ~29600 keys above the 256th largest thread key, so the
// list overflows and the exact radix select must give the same answer. Thread t of the 512 owns the
// float4 groups t, t + 512, t + 1024, ... (logits 4 (t + 512 m) + q).
TEST_F(LogprobsTest, CandidateOverflowTakesTheFallback) {
  const int64_t vocab = 151936;
  const int rows = 2, k = 256;
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> logits(rows * vocab);
  for (int r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i) {
      const int64_t group = i / 4, thread = group % 512, m = group / 512, q = i % 4;
      logits[r * vocab + i] = thread < 100 ? 20.0f + static_cast<float>(m) + 0.25f * static_cast<float>(q) : dist(rng_);
    }
  }
  std::vector<int32_t> targets = {1, 4097};
  const Results res = run_both(logits, targets, rows, vocab, k);
  EXPECT_EQ(res.gpu_ids, res.cpu_ids);
  for (size_t i = 0; i < res.gpu_top.size(); ++i) EXPECT_NEAR(res.gpu_top[i], res.cpu_top[i], 1e-3) << "entry " << i;
}

}  // namespace
}  // namespace nanovllm::test
