// The GPU sampler against the CPU sampler (the same steps, see backend.h and cpu/sampler.cpp) and against
// the distribution it must draw from.
#include <algorithm>
#include <map>

#include "tests/cuda/ops/sampler_test_support.h"

namespace nanovllm::test {
namespace {

int argmax(const float* row, int64_t vocab) {
  int best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (row[i] > row[best]) best = static_cast<int>(i);
  }
  return best;
}

TEST_F(SamplerTest, GreedyIsExactAndTakesLowestIndexOnTies) {
  for (int64_t vocab : {int64_t{151936}, int64_t{1003}, int64_t{8}}) {
    const int rows = 7;
    auto logits = random_logits(rows, vocab);
    // Row 1: a tie for the maximum at two indices in different chunks.
    const float top = *std::max_element(logits.begin() + vocab, logits.begin() + 2 * vocab) + 1.0f;
    logits[vocab + vocab - 1] = top;
    logits[vocab + vocab / 2] = top;
    SamplerRows r;
    for (int i = 0; i < rows; ++i) r.add(0.0f, i == 2 ? 5 : -1, i == 3 ? 0.5f : 1.0f, i == 4 ? 0.1f : 0.0f, 1, 0);
    const auto got = sample_gpu(logits, vocab, r);
    EXPECT_EQ(got, sample_cpu(logits, vocab, r)) << "vocab " << vocab;
    for (int i = 0; i < rows; ++i) EXPECT_EQ(got[i], argmax(&logits[i * vocab], vocab)) << "row " << i;
    EXPECT_EQ(got[1], vocab / 2);
  }
}

// Rows covering each path: plain temperature, min_p, top_k, top_p and their combinations.
SamplerRows mixed_rows(int rows, int32_t step_base) {
  SamplerRows r;
  const float temps[] = {0.7f, 1.0f, 1.3f, 0.3f};
  for (int i = 0; i < rows; ++i) {
    const float t = temps[i % 4];
    switch (i % 8) {
      case 0: r.add(t, -1, 1.0f, 0.0f, 1000 + i, step_base + i); break;
      case 1: r.add(t, -1, 1.0f, 0.05f, 1000 + i, step_base + i); break;
      case 2: r.add(t, 50, 1.0f, 0.0f, 1000 + i, step_base + i); break;
      case 3: r.add(t, -1, 0.9f, 0.0f, 1000 + i, step_base + i); break;
      case 4: r.add(t, 20, 0.8f, 0.02f, 1000 + i, step_base + i); break;
      case 5: r.add(t, 1000, 0.95f, 0.0f, 1000 + i, step_base + i); break;
      case 6: r.add(t, 0, 0.5f, 0.1f, 1000 + i, step_base + i); break;
      default: r.add(0.0f, -1, 1.0f, 0.0f, 1000 + i, step_base + i); break;
    }
  }
  return r;
}

class SeededSampling : public SamplerTest {
 protected:
  void expect_matches_cpu(int64_t vocab, int rows) {
    const auto logits = random_logits(rows, vocab);
    const SamplerRows r = mixed_rows(rows, 3);
    const auto got = sample_gpu(logits, vocab, r);
    const auto want = sample_cpu(logits, vocab, r);
    int mismatches = 0;
    for (int i = 0; i < rows; ++i) {
      if (got[i] != want[i]) {
        ++mismatches;
        std::printf("vocab %ld row %d (case %d): gpu %d cpu %d\n", static_cast<long>(vocab), i, i % 8, got[i],
                    want[i]);
      }
    }
    // Both draw the same noise; only an fp32 near-tie (log / exp ulps differ) may flip a row.
    EXPECT_LE(mismatches, 1) << "vocab " << vocab;
  }
};

TEST_F(SeededSampling, MatchesCpuFullVocab) { expect_matches_cpu(151936, 64); }

// Small enough for compute-sanitizer's racecheck (run_on_device.sh): every path, radix selects included.
TEST_F(SeededSampling, MatchesCpuSmallVocab) { expect_matches_cpu(1003, 16); }

// Real models' logits have a few tokens far above the bulk: there the fast path skips the noise of tokens
// that cannot win (an exact pruning), so the draws must still equal the CPU's, which draws every token.
TEST_F(SamplerTest, PeakedLogitsMatchCpu) {
  const int64_t vocab = 151936;
  const int rows = 64;
  auto logits = random_logits(rows, vocab, 2.0f);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < 6; ++j) logits[r * vocab + rng_() % vocab] += 12.0f + 3.0f * j;
  }
  const SamplerRows rs = mixed_rows(rows, 5);
  const auto got = sample_gpu(logits, vocab, rs);
  const auto want = sample_cpu(logits, vocab, rs);
  int mismatches = 0;
  for (int i = 0; i < rows; ++i) mismatches += got[i] != want[i];
  EXPECT_LE(mismatches, 1);
}

TEST_F(SamplerTest, PrunedTokensKeepTheDistribution) {
  // With T = 1, tokens 3 and 5 lie beyond the pruning distance (19.6) of the top; token 4 just inside.
  const std::vector<float> base = {3.0f, 2.5f, 2.0f, -17.0f, -16.5f, -30.0f};
  const int64_t vocab = static_cast<int64_t>(base.size());
  const int rows = 4096;
  std::vector<float> logits;
  for (int i = 0; i < rows; ++i) logits.insert(logits.end(), base.begin(), base.end());
  SamplerRows r;
  for (int i = 0; i < rows; ++i) r.add(1.0f, -1, 1.0f, 0.0f, 99, i);
  const auto got = sample_gpu(logits, vocab, r);
  EXPECT_EQ(got, sample_cpu(logits, vocab, r));
  double z = 0;
  for (float b : base) z += std::exp(b);
  std::vector<int> count(vocab, 0);
  for (int32_t t : got) ++count[t];
  for (int64_t i = 0; i < vocab; ++i) {
    const double p = std::exp(base[i]) / z, sigma = std::sqrt(std::max(p * (1 - p), 1e-12) / rows);
    EXPECT_NEAR(static_cast<double>(count[i]) / rows, p, 5 * sigma + 1e-3) << "token " << i;
  }
}

TEST_F(SamplerTest, SeededSamplingIsReproducibleAndStepDependent) {
  const int64_t vocab = 151936;
  const int rows = 32;
  const auto logits = random_logits(rows, vocab, 1.0f);
  const SamplerRows a = mixed_rows(rows, 10);
  EXPECT_EQ(sample_gpu(logits, vocab, a), sample_gpu(logits, vocab, a));
  const SamplerRows b = mixed_rows(rows, 11);
  const auto ta = sample_gpu(logits, vocab, a), tb = sample_gpu(logits, vocab, b);
  int differ = 0;
  for (int i = 0; i < rows; ++i) differ += ta[i] != tb[i];
  EXPECT_GE(differ, rows / 2) << "another step must draw other noise";
}

TEST_F(SamplerTest, TopK1AndTinyTopPAreGreedy) {
  const int64_t vocab = 151936;
  const int rows = 9;
  const auto logits = random_logits(rows, vocab);
  SamplerRows r;
  for (int i = 0; i < rows; ++i) {
    if (i % 2 == 0) {
      r.add(0.9f, 1, 1.0f, 0.0f, 77 + i, i);
    } else {
      r.add(1.1f, -1, 1e-6f, 0.0f, 77 + i, i);
    }
  }
  const auto got = sample_gpu(logits, vocab, r);
  for (int i = 0; i < rows; ++i) EXPECT_EQ(got[i], argmax(&logits[i * vocab], vocab)) << "row " << i;
}

TEST_F(SamplerTest, MaskedTokensAreNeverDrawn) {
  const int64_t vocab = 151936;
  std::vector<float> logits(4 * vocab, -INFINITY);
  logits[5] = 1.0f;
  logits[99999] = 1.5f;
  logits[vocab + 7] = 0.0f;
  // Row 2: every z = logit / 0.01 overflows to -inf, so nothing is kept: greedy on the raw logits.
  for (int64_t i = 0; i < vocab; ++i) logits[2 * vocab + i] = -3e38f;
  logits[2 * vocab + 123] = -2e38f;
  // Row 3: min_p > 1 still keeps the most likely token.
  for (int64_t i = 0; i < vocab; ++i) logits[3 * vocab + i] = static_cast<float>(i % 1000) * 1e-3f;
  logits[3 * vocab + 4321] = 5.0f;
  SamplerRows r;
  r.add(1.0f, -1, 1.0f, 0.0f, 3, 0);
  r.add(1.0f, 10, 0.9f, 0.0f, 3, 0);
  r.add(0.01f, -1, 1.0f, 0.0f, 3, 0);
  r.add(1.0f, -1, 1.0f, 2.0f, 3, 0);
  for (int step = 0; step < 20; ++step) {
    r.step = {step, step, step, step};
    const auto got = sample_gpu(logits, vocab, r);
    EXPECT_TRUE(got[0] == 5 || got[0] == 99999) << got[0];
    EXPECT_EQ(got[1], 7);
    EXPECT_EQ(got[2], 123);
    EXPECT_EQ(got[3], 4321);
    EXPECT_EQ(got, sample_cpu(logits, vocab, r));
  }
}

// Many rows with the same logits and different steps draw i.i.d. tokens: their frequencies must match the
// filtered softmax within 5 standard deviations (n = 4096), and filtered-out tokens must never appear.
TEST_F(SamplerTest, EmpiricalDistributionMatchesFilteredSoftmax) {
  const std::vector<float> base = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.2f, 0.3f, -2.0f};
  const int64_t vocab = static_cast<int64_t>(base.size());
  const int rows = 4096;
  std::vector<float> logits;
  for (int i = 0; i < rows; ++i) logits.insert(logits.end(), base.begin(), base.end());

  struct Filter {
    const char* name;
    float temperature;
    int top_k;
    float top_p, min_p;
  };
  for (const Filter& f : {Filter{"plain", 1.0f, -1, 1.0f, 0.0f}, Filter{"hot", 2.0f, -1, 1.0f, 0.0f},
                          Filter{"top_k3", 1.0f, 3, 1.0f, 0.0f}, Filter{"top_p0.6", 1.0f, -1, 0.6f, 0.0f},
                          Filter{"min_p0.3", 1.0f, -1, 1.0f, 0.3f}, Filter{"all", 0.8f, 5, 0.9f, 0.1f}}) {
    // The expected distribution, computed as backend.h defines it.
    std::vector<double> p(vocab);
    double zmax = -1e30;
    for (int64_t i = 0; i < vocab; ++i) zmax = std::max(zmax, static_cast<double>(base[i] / f.temperature));
    std::vector<int> order(vocab);
    for (int64_t i = 0; i < vocab; ++i) order[i] = static_cast<int>(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return base[a] > base[b] || (base[a] == base[b] && a < b); });
    std::vector<int> kept;
    for (int i : order) {
      const double e = std::exp(base[i] / f.temperature - zmax);
      if (f.min_p > 0 && e < f.min_p) continue;
      kept.push_back(i);
    }
    if (f.top_k > 0 && static_cast<size_t>(f.top_k) < kept.size()) kept.resize(f.top_k);
    double total = 0;
    for (int i : kept) total += std::exp(base[i] / f.temperature - zmax);
    if (f.top_p < 1.0f) {
      double cum = 0;
      size_t n = 0;
      while (n < kept.size()) {
        cum += std::exp(base[kept[n]] / f.temperature - zmax) / total;
        ++n;
        if (cum >= f.top_p) break;
      }
      kept.resize(n);
      total = 0;
      for (int i : kept) total += std::exp(base[i] / f.temperature - zmax);
    }
    for (int i : kept) p[i] = std::exp(base[i] / f.temperature - zmax) / total;

    SamplerRows r;
    for (int i = 0; i < rows; ++i) r.add(f.temperature, f.top_k, f.top_p, f.min_p, 42, i);
    const auto got = sample_gpu(logits, vocab, r);
    std::vector<int> count(vocab, 0);
    for (int32_t t : got) {
      ASSERT_TRUE(t >= 0 && t < vocab) << f.name << ": token " << t;
      ++count[t];
    }
    for (int64_t i = 0; i < vocab; ++i) {
      const double freq = static_cast<double>(count[i]) / rows;
      const double sigma = std::sqrt(std::max(p[i] * (1 - p[i]), 1e-12) / rows);
      if (p[i] == 0) {
        EXPECT_EQ(count[i], 0) << f.name << ": token " << i << " is filtered out but was drawn";
      } else {
        EXPECT_NEAR(freq, p[i], 5 * sigma + 1e-3) << f.name << ": token " << i;
      }
    }
    // The CPU sampler draws the same tokens from the same noise.
    const auto want = sample_cpu(logits, vocab, r);
    int mismatches = 0;
    for (int i = 0; i < rows; ++i) mismatches += got[i] != want[i];
    EXPECT_LE(mismatches, 2) << f.name;
  }
}

}  // namespace
}  // namespace nanovllm::test
