// The sampler's semantics (see the top of src/backend/cpu/sampler.cpp): greedy, seeded reproducibility,
// each filter, and that the sampled distribution is softmax(logits / T).
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "backend/philox.h"
#include "test_helpers.h"

namespace nanovllm {
namespace {

using test::OwnedTensor;

struct RowParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  int64_t seed = 0;
  int32_t step = 0;
};

// Samples every row of logits [rows, vocab] with its own controls; returns the token ids.
std::vector<int32_t> sample(CpuBackend& backend, const std::vector<float>& logits, int64_t vocab,
                            const std::vector<RowParams>& rows) {
  const int64_t r = static_cast<int64_t>(rows.size());
  OwnedTensor logits_t = test::make_tensor(backend, DType::F32, {r, vocab});
  std::copy(logits.begin(), logits.end(), logits_t.f32());
  OwnedTensor temperature = test::make_tensor(backend, DType::F32, {r});
  OwnedTensor top_k = test::make_tensor(backend, DType::I32, {r});
  OwnedTensor top_p = test::make_tensor(backend, DType::F32, {r});
  OwnedTensor min_p = test::make_tensor(backend, DType::F32, {r});
  OwnedTensor seed = test::make_tensor(backend, DType::I64, {r});
  OwnedTensor step = test::make_tensor(backend, DType::I32, {r});
  for (int64_t i = 0; i < r; ++i) {
    temperature.f32()[i] = rows[i].temperature;
    top_k.i32()[i] = rows[i].top_k;
    top_p.f32()[i] = rows[i].top_p;
    min_p.f32()[i] = rows[i].min_p;
    seed.tensor.as<int64_t>()[i] = rows[i].seed;
    step.i32()[i] = rows[i].step;
  }
  SamplerInputs in{temperature.tensor, top_k.tensor, top_p.tensor, min_p.tensor, seed.tensor, step.tensor};
  OwnedTensor out = test::make_tensor(backend, DType::I32, {r});
  std::fill(out.i32(), out.i32() + r, -7);
  backend.sample(logits_t.tensor, in, out.tensor);
  return std::vector<int32_t>(out.i32(), out.i32() + r);
}

int32_t sample_one(CpuBackend& backend, const std::vector<float>& logits, const RowParams& p) {
  return sample(backend, logits, static_cast<int64_t>(logits.size()), {p})[0];
}

std::vector<float> random_logits(int64_t vocab, std::mt19937& rng, float spread = 3.0f) {
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = dist(rng);
  return logits;
}

int32_t argmax(const std::vector<float>& x, int64_t begin = 0, int64_t end = -1) {
  if (end < 0) end = static_cast<int64_t>(x.size());
  int64_t best = begin;
  for (int64_t i = begin; i < end; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best - begin);
}

TEST(CpuSampler, GreedyIsArgmaxWithLowestIndexOnTies) {
  CpuBackend backend;
  std::mt19937 rng(51);
  const int64_t vocab = 1001;
  std::vector<float> logits;
  std::vector<RowParams> rows;
  for (int r = 0; r < 17; ++r) {
    auto row = random_logits(vocab, rng);
    if (r % 3 == 0) row[900] = row[37] = 100.0f;  // a tie: 37 must win
    logits.insert(logits.end(), row.begin(), row.end());
    rows.push_back({0.0f, 5, 0.5f, 0.3f, r, r});  // filters are ignored at temperature 0
  }
  const auto got = sample(backend, logits, vocab, rows);
  for (int r = 0; r < 17; ++r) {
    const int32_t want = argmax(logits, r * vocab, (r + 1) * vocab);
    EXPECT_EQ(got[r], want) << "row " << r;
    if (r % 3 == 0) {
      EXPECT_EQ(got[r], 37);
    }
  }
}

TEST(CpuSampler, SeededSamplingIsReproducibleAndVariesWithSeedAndStep) {
  CpuBackend backend;
  std::mt19937 rng(52);
  const auto logits = random_logits(5000, rng, 0.5f);  // flat enough that many tokens are likely
  std::set<int32_t> across_seeds, across_steps;
  for (int i = 0; i < 40; ++i) {
    const RowParams by_seed{1.0f, 0, 1.0f, 0.0f, 1000 + i, 7};
    const RowParams by_step{1.0f, 0, 1.0f, 0.0f, 1234, i};
    const int32_t a = sample_one(backend, logits, by_seed);
    EXPECT_EQ(a, sample_one(backend, logits, by_seed));
    across_seeds.insert(a);
    across_steps.insert(sample_one(backend, logits, by_step));
  }
  EXPECT_GT(across_seeds.size(), 20u);
  EXPECT_GT(across_steps.size(), 20u);
  // The upper half of the 64-bit seed matters too.
  std::set<int32_t> high_seeds;
  for (int64_t i = 1; i <= 20; ++i) high_seeds.insert(sample_one(backend, logits, {1.0f, 0, 1.0f, 0.0f, i << 40, 3}));
  EXPECT_GT(high_seeds.size(), 10u);
}

TEST(CpuSampler, RowsOfOneCallMatchSeparateCalls) {
  CpuBackend backend;
  std::mt19937 rng(53);
  const int64_t vocab = 333;
  std::vector<float> logits;
  std::vector<RowParams> rows;
  for (int r = 0; r < 9; ++r) {
    auto row = random_logits(vocab, rng, 1.0f);
    logits.insert(logits.end(), row.begin(), row.end());
    rows.push_back(
        {0.5f + 0.1f * r, r % 3 == 0 ? 10 : 0, r % 2 ? 0.9f : 1.0f, r % 4 == 1 ? 0.05f : 0.0f, 77 * r, 5 + r});
  }
  const auto together = sample(backend, logits, vocab, rows);
  for (int r = 0; r < 9; ++r) {
    const std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    EXPECT_EQ(together[r], sample_one(backend, row, rows[r])) << "row " << r;
  }
}

TEST(CpuSampler, TopKOneAndTinyTopPAreGreedy) {
  CpuBackend backend;
  std::mt19937 rng(54);
  for (int i = 0; i < 30; ++i) {
    const auto logits = random_logits(2000, rng, 1.0f);
    const int32_t greedy = argmax(logits);
    EXPECT_EQ(sample_one(backend, logits, {1.3f, 1, 1.0f, 0.0f, i, i}), greedy);
    EXPECT_EQ(sample_one(backend, logits, {1.3f, 0, 1e-6f, 0.0f, i, i}), greedy);
    EXPECT_EQ(sample_one(backend, logits, {1.3f, 0, 0.0f, 0.0f, i, i}), greedy);  // at least one token kept
  }
}

// Token counts over many steps of one seeded stream.
std::vector<int> histogram(CpuBackend& backend, const std::vector<float>& logits, RowParams p, int steps) {
  std::vector<int> counts(logits.size(), 0);
  for (int s = 0; s < steps; ++s) {
    p.step = s;
    ++counts[sample_one(backend, logits, p)];
  }
  return counts;
}

// Pearson's chi-square statistic of counts against probabilities (cells with p = 0 must have no count).
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int steps) {
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has zero probability";
      continue;
    }
    const double expected = probs[i] * steps;
    chi += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature, const std::vector<bool>& keep) {
  std::vector<double> p(logits.size(), 0.0);
  double max_z = -1e300, total = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (keep[i]) max_z = std::max(max_z, logits[i] / temperature);
  for (size_t i = 0; i < logits.size(); ++i)
    if (keep[i]) total += (p[i] = std::exp(logits[i] / temperature - max_z));
  for (double& x : p) x /= total;
  return p;
}

TEST(CpuSampler, EmpiricalDistributionMatchesSoftmax) {
  CpuBackend backend;
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, 2.2f, -0.3f};
  const int steps = 20000;
  for (float temperature : {0.7f, 1.0f, 2.0f}) {
    const auto counts = histogram(backend, logits, {temperature, 0, 1.0f, 0.0f, 99, 0}, steps);
    const auto probs = softmax(logits, temperature, std::vector<bool>(logits.size(), true));
    // 7 degrees of freedom: P(chi² > 30) ≈ 1e-4, and a wrong temperature or bias gives hundreds.
    EXPECT_LT(chi_square(counts, probs, steps), 30.0) << "temperature " << temperature;
  }
  // The same counts judged against the wrong temperature must fail the bound (the test can fail).
  const auto counts = histogram(backend, logits, {1.0f, 0, 1.0f, 0.0f, 99, 0}, steps);
  EXPECT_GT(chi_square(counts, softmax(logits, 1.3, std::vector<bool>(logits.size(), true)), steps), 30.0);
}

TEST(CpuSampler, TopKKeepsExactlyKWithTiesByLowerIndex) {
  CpuBackend backend;
  // Sorted: 0 (5), then 1, 2, 3 tied (3), then 4. top_k = 2 keeps {0, 1}: token 1 wins the tie by index.
  const std::vector<float> logits = {5.0f, 3.0f, 3.0f, 3.0f, 1.0f};
  const int steps = 4000;
  const auto counts = histogram(backend, logits, {1.0f, 2, 1.0f, 0.0f, 5, 0}, steps);
  const auto probs = softmax(logits, 1.0, {true, true, false, false, false});
  EXPECT_GT(counts[1], 0);
  EXPECT_LT(chi_square(counts, probs, steps), 15.0);  // 1 degree of freedom
}

TEST(CpuSampler, TopPKeepsTheSmallestPrefixReachingP) {
  CpuBackend backend;
  // Probabilities 0.5, 0.3, 0.15, 0.05 (as logs); top_p 0.75 keeps tokens 3 and 0 (the two largest).
  const std::vector<float> logits = {std::log(0.3f), std::log(0.05f), std::log(0.15f), std::log(0.5f)};
  const int steps = 4000;
  const auto counts = histogram(backend, logits, {1.0f, 0, 0.75f, 0.0f, 6, 0}, steps);
  EXPECT_LT(chi_square(counts, softmax(logits, 1.0, {true, false, false, true}), steps), 15.0);
  // 0.85 needs the third token as well.
  const auto wider = histogram(backend, logits, {1.0f, 0, 0.85f, 0.0f, 6, 0}, steps);
  EXPECT_LT(chi_square(wider, softmax(logits, 1.0, {true, false, true, true}), steps), 20.0);
}

TEST(CpuSampler, TopPNeedingManyTokensMatchesAFullSort) {
  // A flat distribution over 5000 tokens: top_p 0.9 keeps thousands, past the first partial sort.
  CpuBackend backend;
  std::mt19937 rng(57);
  const auto logits = random_logits(5000, rng, 0.3f);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  const float max_z = logits[order[0]];
  double total = 0, cumulative = 0;
  for (float x : logits) total += std::exp(static_cast<double>(x) - max_z);
  std::vector<bool> keep(logits.size(), false);
  size_t kept = 0;
  while (kept == 0 || cumulative < 0.9) {
    cumulative += std::exp(static_cast<double>(logits[order[kept]]) - max_z) / total;
    keep[order[kept++]] = true;
  }
  ASSERT_GT(kept, 2000u);
  std::vector<size_t> rank(logits.size());
  for (size_t r = 0; r < order.size(); ++r) rank[order[r]] = r;
  int past_first_candidates = 0;
  for (int s = 0; s < 300; ++s) {
    const int32_t t = sample_one(backend, logits, {1.0f, 0, 0.9f, 0.0f, 31, s});
    ASSERT_TRUE(keep[t]) << "token " << t << " is outside the top_p prefix";
    past_first_candidates += rank[t] >= 1024;
  }
  EXPECT_GT(past_first_candidates, 50);  // the prefix really reaches past the first 1024 sorted tokens
}

TEST(CpuSampler, TopPAppliesAfterTopKOnTheRenormalisedMass) {
  CpuBackend backend;
  // top_k 2 keeps 0.5 and 0.3 → renormalised 0.625 / 0.375; top_p 0.6 then keeps only the first.
  const std::vector<float> logits = {std::log(0.3f), std::log(0.05f), std::log(0.15f), std::log(0.5f)};
  for (int s = 0; s < 200; ++s) EXPECT_EQ(sample_one(backend, logits, {1.0f, 2, 0.6f, 0.0f, 8, s}), 3);
}

TEST(CpuSampler, MinPDropsUnlikelyTokens) {
  CpuBackend backend;
  // p relative to the max: 1, 0.5, 0.2, 0.05. min_p 0.1 keeps the first three.
  const std::vector<float> logits = {0.0f, std::log(0.5f), std::log(0.2f), std::log(0.05f)};
  const int steps = 4000;
  const auto counts = histogram(backend, logits, {1.0f, 0, 1.0f, 0.1f, 7, 0}, steps);
  EXPECT_LT(chi_square(counts, softmax(logits, 1.0, {true, true, true, false}), steps), 20.0);
  // min_p is judged after temperature: at T = 0.5, relative p = 1, 0.25, 0.04, 0.0025, so only two remain.
  const auto cold = histogram(backend, logits, {0.5f, 0, 1.0f, 0.1f, 7, 0}, steps);
  EXPECT_LT(chi_square(cold, softmax(logits, 0.5, {true, true, false, false}), steps), 15.0);
  // min_p 1 keeps only the most likely token; so does an out-of-range min_p.
  for (int s = 0; s < 50; ++s) {
    EXPECT_EQ(sample_one(backend, logits, {1.0f, 0, 1.0f, 1.0f, 7, s}), 0);
    EXPECT_EQ(sample_one(backend, logits, {1.0f, 0, 1.0f, 1.5f, 7, s}), 0);
  }
}

TEST(CpuSampler, NegativeInfinityIsNeverSampled) {
  CpuBackend backend;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {-inf, 0.0f, -inf, 0.1f, -inf};
  for (int s = 0; s < 300; ++s) {
    const int32_t t = sample_one(backend, logits, {1.0f, 0, 1.0f, 0.0f, 3, s});
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(CpuSampler, GumbelNoiseIsPhiloxOfSeedStepToken) {
  CpuBackend backend;
  // Equal logits: the winner is the token with the largest philox uniform.
  const int64_t vocab = 64;
  const std::vector<float> logits(vocab, 0.25f);
  for (int s = 0; s < 20; ++s) {
    const uint64_t seed = 0x123456789abcull + s;
    int32_t want = 0;
    for (int32_t i = 1; i < vocab; ++i)
      if (philox_uniform(seed, s, i) > philox_uniform(seed, s, want)) want = i;
    EXPECT_EQ(sample_one(backend, logits, {1.0f, 0, 1.0f, 0.0f, static_cast<int64_t>(seed), s}), want);
  }
}

}  // namespace
}  // namespace nanovllm
