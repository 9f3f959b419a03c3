// The sampler's semantics (see the top of src/backend/cpu/sampler.cpp): greedy, seeded reproducibility,
// each filter, and that the sampled distribution is softmax(logits / T); and sample_shard, whose per-shard
// picks must merge to sample()'s token on any split of the vocabulary.
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

// The controls of every row, as backend tensors.
struct Controls {
  OwnedTensor temperature, top_k, top_p, min_p, seed, step;
  SamplerInputs inputs() const {
    return {temperature.tensor, top_k.tensor, top_p.tensor, min_p.tensor, seed.tensor, step.tensor};
  }
};

Controls make_controls(CpuBackend& backend, const std::vector<RowParams>& rows) {
  const int64_t r = static_cast<int64_t>(rows.size());
  Controls c{test::make_tensor(backend, DType::F32, {r}), test::make_tensor(backend, DType::I32, {r}),
             test::make_tensor(backend, DType::F32, {r}), test::make_tensor(backend, DType::F32, {r}),
             test::make_tensor(backend, DType::I64, {r}), test::make_tensor(backend, DType::I32, {r})};
  for (int64_t i = 0; i < r; ++i) {
    c.temperature.f32()[i] = rows[i].temperature;
    c.top_k.i32()[i] = rows[i].top_k;
    c.top_p.f32()[i] = rows[i].top_p;
    c.min_p.f32()[i] = rows[i].min_p;
    c.seed.tensor.as<int64_t>()[i] = rows[i].seed;
    c.step.i32()[i] = rows[i].step;
  }
  return c;
}

// Samples every row of logits [rows, vocab] with its own controls; returns the token ids.
std::vector<int32_t> sample(CpuBackend& backend, const std::vector<float>& logits, int64_t vocab,
                            const std::vector<RowParams>& rows) {
  const int64_t r = static_cast<int64_t>(rows.size());
  OwnedTensor logits_t = test::make_tensor(backend, DType::F32, {r, vocab});
  std::copy(logits.begin(), logits.end(), logits_t.f32());
  const Controls controls = make_controls(backend, rows);
  OwnedTensor out = test::make_tensor(backend, DType::I32, {r});
  std::fill(out.i32(), out.i32() + r, -7);
  backend.sample(logits_t.tensor, controls.inputs(), out.tensor);
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

// Inputs that say no row has top_k or top_p on: the same tokens for rows without them, and an error naming the row
// for one that has them (the CUDA sampler would skip it).
TEST(CpuSampler, InputsWithoutTopKOrTopPAreHeldToIt) {
  CpuBackend backend;
  std::mt19937 rng(59);
  const int64_t vocab = 257;
  std::vector<float> logits;
  std::vector<RowParams> rows = {{0.0f}, {0.7f, 0, 1.0f, 0.0f, 5, 3}, {0.9f, 0, 1.0f, 0.05f, 6, 4}, {0.8f, 20}};
  for (size_t r = 0; r < rows.size(); ++r) {
    auto row = random_logits(vocab, rng, 1.0f);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  auto run = [&](size_t n, bool any_top_k_or_top_p) {
    OwnedTensor logits_t = test::make_tensor(backend, DType::F32, {static_cast<int64_t>(n), vocab});
    std::copy(logits.begin(), logits.begin() + static_cast<int64_t>(n) * vocab, logits_t.f32());
    const Controls controls = make_controls(backend, std::vector<RowParams>(rows.begin(), rows.begin() + n));
    SamplerInputs in = controls.inputs();
    in.any_top_k_or_top_p = any_top_k_or_top_p;
    OwnedTensor out = test::make_tensor(backend, DType::I32, {static_cast<int64_t>(n)});
    backend.sample(logits_t.tensor, in, out.tensor);
    return std::vector<int32_t>(out.i32(), out.i32() + n);
  };
  EXPECT_EQ(run(3, false), run(3, true));
  try {
    run(4, false);
    FAIL() << "a top_k row under inputs that say there is none was sampled";
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find("row 3 has top_k or top_p on"), std::string::npos) << e.what();
  }
  EXPECT_EQ(run(4, true).size(), 4u);
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

// --- sample_shard: sample()'s pick on one vocabulary shard (tensor parallelism) ---

struct ShardPicks {
  std::vector<float> key;
  std::vector<int32_t> token;
};

// sample_shard on columns [begin, begin + chunk) of logits [rows, vocab], as a rank holding that chunk of the
// lm_head sees them: a [rows, chunk] tensor whose columns past the vocabulary hold `pad`.
ShardPicks sample_shard(CpuBackend& backend, const std::vector<float>& logits, int64_t vocab, int64_t begin,
                        int64_t chunk, float pad, const std::vector<RowParams>& rows) {
  const int64_t r = static_cast<int64_t>(rows.size());
  const int64_t valid = std::clamp<int64_t>(vocab - begin, 0, chunk);
  OwnedTensor part = test::make_tensor(backend, DType::F32, {r, chunk});
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < chunk; ++j) part.f32()[i * chunk + j] = j < valid ? logits[i * vocab + begin + j] : pad;
  }
  const Controls controls = make_controls(backend, rows);
  OwnedTensor key = test::poisoned_f32(backend, {r});
  OwnedTensor token = test::make_tensor(backend, DType::I32, {r});
  std::fill(token.i32(), token.i32() + r, -7);
  backend.sample_shard(part.tensor, begin, valid, controls.inputs(), key.tensor, token.tensor);
  return {key.to_vector(), std::vector<int32_t>(token.i32(), token.i32() + r)};
}

// The engine's merge (Backend::merge_shard_pick, then ShardPick::sampled_token).
using Merged = Backend::ShardPick;

std::vector<Merged> merge_shards(const std::vector<ShardPicks>& shards, size_t rows) {
  std::vector<Merged> merged(rows);
  for (size_t r = 0; r < rows; ++r) {
    for (const ShardPicks& s : shards) Backend::merge_shard_pick(merged[r], s.key[r], s.token[r]);
    merged[r].token = merged[r].sampled_token();
  }
  return merged;
}

// Every shard of a P-way split (chunk = ceil(V / P), the last ones padded or empty), merged.
std::vector<Merged> sample_sharded(CpuBackend& backend, const std::vector<float>& logits, int64_t vocab, int parts,
                                   float pad, const std::vector<RowParams>& rows) {
  const int64_t chunk = (vocab + parts - 1) / parts;
  std::vector<ShardPicks> shards;
  for (int p = 0; p < parts; ++p) {
    shards.push_back(sample_shard(backend, logits, vocab, p * chunk, chunk, pad, rows));
    for (size_t r = 0; r < rows.size(); ++r) {  // every output written, tokens inside the shard or "none"
      const int32_t t = shards.back().token[r];
      const bool none = t == Backend::ShardPick::kNoToken;
      EXPECT_TRUE(none || (t >= p * chunk && t < std::min<int64_t>(vocab, (p + 1) * chunk)))
          << "P " << parts << " shard " << p << " row " << r << ": token " << t;
      EXPECT_EQ(none, shards.back().key[r] == -std::numeric_limits<float>::infinity()) << "row " << r;
    }
  }
  return merge_shards(shards, rows.size());
}

// The key sample() compares for token t of a row (backend.h): the raw logit when greedy, else
// z - log(-log(u)) with z = logit / T and u = min(philox_uniform(seed, step, t), 1 - 2^-24).
float reference_key(float logit, const RowParams& p, int32_t token) {
  if (!(p.temperature > 0.0f)) return logit;
  const float u = std::min(
      philox_uniform(static_cast<uint64_t>(p.seed), static_cast<uint32_t>(p.step), static_cast<uint32_t>(token)),
      0x1.fffffep-1f);
  return logit / p.temperature - std::log(-std::log(u));
}

// Rows of V = 1001 (odd, so every split pads): temperature and greedy rows, ties, masked tokens, NaN.
std::vector<float> shard_test_logits(int64_t vocab, std::mt19937& rng) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits;
  for (int r = 0; r < 7; ++r) {
    auto row = random_logits(vocab, rng, r == 6 ? 0.5f : 3.0f);
    switch (r) {
      case 1:  // greedy: a tie for the maximum in different shards; 37 must win
        row[900] = row[37] = 100.0f;
        break;
      case 2:  // temperature: the first 600 tokens masked (whole shards have nothing), a few NaN
        std::fill(row.begin(), row.begin() + 600, -inf);
        row[700] = row[950] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 3:  // temperature: two +inf logits in different shards tie at key +inf; the lower token wins
        row[250] = row[800] = inf;
        break;
      case 4:  // greedy: the last 701 tokens masked or NaN
        std::fill(row.begin() + 300, row.end(), -inf);
        row[310] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 5:  // peaked, as a real model: most of the noise is pruned
        for (int j = 0; j < 6; ++j) row[rng() % vocab] += 12.0f + 3.0f * j;
        break;
      default:
        break;
    }
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

std::vector<RowParams> shard_test_rows(int32_t step) {
  return {{0.7f, 0, 1.0f, 0.0f, 11, step},       {0.0f, 0, 1.0f, 0.0f, 12, step + 1},
          {1.0f, 0, 1.0f, 0.0f, 13, 3 * step},   {1.3f, 0, 1.0f, 0.0f, 14, step},
          {0.0f, 0, 1.0f, 0.0f, 15, step},       {0.3f, 0, 1.0f, 0.0f, 16 + step, 7},
          {2.0f, 0, 1.0f, 0.0f, 1ll << 40, step}};
}

TEST(CpuSampleShard, MergedShardsEqualSampleOfTheWholeRow) {
  CpuBackend backend;
  std::mt19937 rng(58);
  const int64_t vocab = 1001;
  const auto logits = shard_test_logits(vocab, rng);
  int sampled_rows_not_argmax = 0;
  for (int32_t step = 0; step < 12; ++step) {
    const auto rows = shard_test_rows(step);
    const auto want = sample(backend, logits, vocab, rows);
    EXPECT_EQ(want[1], 37);
    EXPECT_EQ(want[3], 250);
    for (int r = 0; r < 7; ++r)
      sampled_rows_not_argmax += rows[r].temperature > 0 && want[r] != argmax(logits, r * vocab, (r + 1) * vocab);
    // P = 45 leaves the last shard empty (chunk 23, and 44 * 23 >= 1001).
    for (int parts : {1, 2, 3, 4, 45}) {
      for (float pad : {1e30f, std::numeric_limits<float>::infinity()}) {
        const auto merged = sample_sharded(backend, logits, vocab, parts, pad, rows);
        for (int r = 0; r < 7; ++r) {
          EXPECT_EQ(merged[r].token, want[r]) << "P " << parts << " pad " << pad << " step " << step << " row " << r;
          // The key is exactly the float sample() compares for that token.
          const float k = reference_key(logits[r * vocab + want[r]], rows[r], want[r]);
          EXPECT_EQ(merged[r].key, k) << "P " << parts << " step " << step << " row " << r;
        }
      }
    }
  }
  EXPECT_GT(sampled_rows_not_argmax, 10);  // the temperature rows really sample
}

// Rows where nothing has probability: every shard says so and the merge gives sample()'s 0. Where logits are
// finite but logit / T overflows to -inf, sample() takes the raw argmax instead: the shards report nothing,
// and rerunning them at temperature 0 gives sample()'s token (backend.h).
TEST(CpuSampleShard, RowsWithNothingToSample) {
  CpuBackend backend;
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t vocab = 101;
  std::vector<float> logits(4 * vocab, -inf);
  std::fill(logits.begin() + vocab, logits.begin() + 2 * vocab, std::numeric_limits<float>::quiet_NaN());
  std::fill(logits.begin() + 2 * vocab, logits.begin() + 3 * vocab, -3e38f);
  logits[2 * vocab + 77] = -2e38f;
  std::fill(logits.begin() + 3 * vocab, logits.end(), -3e38f);
  std::vector<RowParams> rows = {{1.0f, 0, 1.0f, 0.0f, 1, 2},
                                 {0.0f, 0, 1.0f, 0.0f, 1, 2},
                                 {0.01f, 0, 1.0f, 0.0f, 1, 2},
                                 {0.0f, 0, 1.0f, 0.0f, 1, 2}};
  const auto want = sample(backend, logits, vocab, rows);
  EXPECT_EQ(want, (std::vector<int32_t>{0, 0, 77, 0}));
  for (int parts : {2, 3}) {
    const auto merged = sample_sharded(backend, logits, vocab, parts, 5.0f, rows);
    EXPECT_EQ(merged[0].token, 0);
    EXPECT_EQ(merged[1].token, 0);
    EXPECT_EQ(merged[2].token, 0);  // nothing of probability in any shard
    EXPECT_EQ(merged[2].key, -inf);
    EXPECT_EQ(merged[3].token, 0);  // greedy: the first of the tied -3e38 logits
    EXPECT_EQ(merged[3].key, -3e38f);
    std::vector<RowParams> greedy = rows;
    for (RowParams& p : greedy) p.temperature = 0.0f;
    const auto rerun = sample_sharded(backend, logits, vocab, parts, 5.0f, greedy);
    EXPECT_EQ(rerun[2].token, want[2]);
  }
}

// top_k, top_p and min_p are not applied: such rows draw as plain temperature sampling.
TEST(CpuSampleShard, FiltersAreIgnored) {
  CpuBackend backend;
  std::mt19937 rng(59);
  const int64_t vocab = 1001;
  const auto logits = shard_test_logits(vocab, rng);
  const auto plain = shard_test_rows(4);
  auto filtered = plain;
  for (RowParams& p : filtered) {
    p.top_k = 3;
    p.top_p = 0.2f;
    p.min_p = 0.5f;
  }
  int differ = 0;
  for (int64_t begin : {int64_t{0}, int64_t{334}, int64_t{668}}) {
    const auto a = sample_shard(backend, logits, vocab, begin, 334, 0.0f, plain);
    const auto b = sample_shard(backend, logits, vocab, begin, 334, 0.0f, filtered);
    EXPECT_EQ(a.token, b.token) << "shard at " << begin;
    for (size_t r = 0; r < plain.size(); ++r) EXPECT_EQ(a.key[r], b.key[r]) << "row " << r;
  }
  // ... whereas sample() does apply them (so the rows above really carry filters that matter).
  const auto with = sample(backend, logits, vocab, filtered), without = sample(backend, logits, vocab, plain);
  for (size_t r = 0; r < plain.size(); ++r) differ += with[r] != without[r];
  EXPECT_GT(differ, 0);
}

TEST(CpuSampleShard, RejectsBadArguments) {
  CpuBackend backend;
  const std::vector<RowParams> rows = shard_test_rows(0);
  const int64_t r = static_cast<int64_t>(rows.size());
  const Controls controls = make_controls(backend, rows);
  OwnedTensor logits = test::make_tensor(backend, DType::F32, {r, 10});
  std::fill(logits.f32(), logits.f32() + logits.numel(), 0.5f);
  OwnedTensor key = test::make_tensor(backend, DType::F32, {r});
  OwnedTensor token = test::make_tensor(backend, DType::I32, {r});
  OwnedTensor short_key = test::make_tensor(backend, DType::F32, {r - 1});
  OwnedTensor i32_logits = test::make_tensor(backend, DType::I32, {r, 10});
  const SamplerInputs in = controls.inputs();
  EXPECT_NO_THROW(backend.sample_shard(logits.tensor, 90, 10, in, key.tensor, token.tensor));
  EXPECT_THROW(backend.sample_shard(logits.tensor, 90, 11, in, key.tensor, token.tensor), EngineError);
  EXPECT_THROW(backend.sample_shard(logits.tensor, 90, -1, in, key.tensor, token.tensor), EngineError);
  EXPECT_THROW(backend.sample_shard(logits.tensor, -1, 10, in, key.tensor, token.tensor), EngineError);
  EXPECT_THROW(backend.sample_shard(logits.tensor, 0, 10, in, short_key.tensor, token.tensor), EngineError);
  EXPECT_THROW(backend.sample_shard(logits.tensor, 0, 10, in, token.tensor, token.tensor), EngineError);
  EXPECT_THROW(backend.sample_shard(i32_logits.tensor, 0, 10, in, key.tensor, token.tensor), EngineError);
  SamplerInputs no_seed = in;
  no_seed.seed = Tensor();
  EXPECT_THROW(backend.sample_shard(logits.tensor, 0, 10, no_seed, key.tensor, token.tensor), EngineError);
  // Only temperature, seed and step are read: rows without the filter tensors are fine.
  SamplerInputs plain = in;
  plain.top_k = plain.top_p = plain.min_p = Tensor();
  EXPECT_NO_THROW(backend.sample_shard(logits.tensor, 0, 10, plain, key.tensor, token.tensor));
}

}  // namespace
}  // namespace nanovllm
