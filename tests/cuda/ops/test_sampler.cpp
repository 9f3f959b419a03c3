// The GPU sampler against the CPU sampler (the same steps, see backend.h and cpu/sampler.cpp) and against
// the distribution it must draw from. The plain rows (greedy / temperature / min_p) have two GPU paths
// (one-pass clusters on sm_90, the chunked path elsewhere): both are run and must agree exactly. The filtered
// rows (top_k / top_p) work on a short candidate list with an exact radix-select fallback: rows that
// overflow the list (ties, top_k > 1024, flat rows with a huge nucleus) are tested too. sample_shard (one
// vocabulary shard, tensor parallelism): both paths, the CPU's sample_shard, merged shards against sample().
#include <algorithm>
#include <map>
#include <random>
#include <string>

#include "backend/cuda/sampler_paths.cuh"
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
  struct Filters {
    int top_k;
    float top_p, min_p;
  };
  static constexpr Filters kFilters[] = {{-1, 1.0f, 0.0f},  {-1, 1.0f, 0.05f},   {50, 1.0f, 0.0f}, {-1, 0.9f, 0.0f},
                                         {20, 0.8f, 0.02f}, {1000, 0.95f, 0.0f}, {0, 0.5f, 0.1f},  {-1, 1.0f, 0.0f}};
  const float temps[] = {0.7f, 1.0f, 1.3f, 0.3f};
  SamplerRows r;
  for (int i = 0; i < rows; ++i) {
    const Filters& f = kFilters[i % 8];
    const float t = i % 8 == 7 ? 0.0f : temps[i % 4];  // every eighth row greedy
    r.add(t, f.top_k, f.top_p, f.min_p, 1000 + i, step_base + i);
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
        std::printf("vocab %ld row %d (case %d): gpu %d cpu %d\n", static_cast<long>(vocab), i, i % 8, got[i], want[i]);
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
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return base[a] > base[b] || (base[a] == base[b] && a < b); });
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

// --- many rows, both plain paths, the filtered path's fallbacks ---

std::vector<int32_t> sample_via(SamplerTest& t, CudaBackend& gpu, const Tensor& logits, const SamplerInputs& in,
                                Tensor& ids, Buffer& workspace, cuda::PlainSamplerPath path) {
  const cuda::SamplerArgs args = CudaBackend::sample_args(logits, in, ids);  // as sample() launches
  cuda::launch_sample_via(args, workspace.data(), workspace.bytes(), gpu.stream(), path);
  gpu.synchronize();
  std::vector<int32_t> out(static_cast<size_t>(args.rows));
  gpu.download(ids.data, out.data(), out.size() * sizeof(int32_t));
  (void)t;
  return out;
}

// Plain rows only: temperature (0.6, as the throughput benchmark), min_p, greedy, hot temperature.
SamplerRows plain_rows(int rows, int32_t step_base) {
  SamplerRows r;
  for (int i = 0; i < rows; ++i) {
    switch (i % 4) {
      case 0:
        r.add(0.6f, -1, 1.0f, 0.0f, 7000 + i, step_base + i);
        break;
      case 1:
        r.add(1.0f, 0, 1.0f, 0.05f, 7000 + i, step_base + i);
        break;
      case 2:
        r.add(0.0f, -1, 1.0f, 0.0f, 7000 + i, step_base + i);
        break;
      default:
        r.add(1.7f, -1, 1.0f, 0.0f, 7000 + i, step_base + i);
        break;
    }
  }
  return r;
}

class PlainPaths : public SamplerTest {
 protected:
  // Both paths on the same inputs: identical tokens; and the CPU's within `cpu_mismatches`.
  void expect_paths_agree(const std::vector<float>& logits, int64_t vocab, const SamplerRows& r, int cpu_mismatches,
                          const std::string& what) {
    const int64_t rows = r.rows();
    const Tensor g_logits = gpu_raw(logits, DType::F32, {rows, vocab});
    const SamplerInputs in = gpu_inputs(r);
    Tensor ids = gpu_empty(DType::I32, {rows});
    Buffer workspace = gpu().allocate(cuda::sampler_workspace_bytes(static_cast<int>(rows), static_cast<int>(vocab)));
    const auto chunked = sample_via(*this, gpu(), g_logits, in, ids, workspace, cuda::PlainSamplerPath::kChunked);
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, gpu().device_index());
    if (major >= 9 && vocab <= 163840) {
      const auto clustered = sample_via(*this, gpu(), g_logits, in, ids, workspace, cuda::PlainSamplerPath::kCluster);
      EXPECT_EQ(clustered, chunked) << what << ": the cluster and chunked paths disagree";
    }
    const auto automatic = sample_gpu(logits, vocab, r);
    EXPECT_EQ(automatic, chunked) << what;
    const auto want = sample_cpu(logits, vocab, r);
    int mismatches = 0;
    for (int64_t i = 0; i < rows; ++i) {
      if (automatic[i] != want[i]) {
        ++mismatches;
        std::printf("%s row %ld: gpu %d cpu %d\n", what.c_str(), static_cast<long>(i), automatic[i], want[i]);
      }
    }
    EXPECT_LE(mismatches, cpu_mismatches) << what;
    for (int64_t i = 0; i < rows; ++i) {
      ASSERT_TRUE(automatic[i] >= 0 && automatic[i] < vocab) << what << " row " << i;
    }
  }
};

TEST_F(PlainPaths, ManyRowsFullVocab) {
  const int64_t vocab = 151936;
  for (int rows : {1, 3, 64, 257, 512}) {
    // Peaked rows (a real model's shape: most noise pruned) for the larger counts keep the CPU side quick.
    auto logits = random_logits(rows, vocab, rows > 64 ? 1.5f : 3.0f);
    if (rows > 64) {
      for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < 8; ++j) logits[r * vocab + rng_() % vocab] += 10.0f + 2.0f * j;
      }
    }
    // Only an fp32 near tie (GPU logf vs CPU log ulps) may flip a row.
    expect_paths_agree(logits, vocab, plain_rows(rows, rows), 1 + rows / 256, "rows " + std::to_string(rows));
  }
}

// Inputs that say no row has top_k or top_p on skip the filtered kernel: rows without them (greedy, plain
// temperature, min_p) get the same tokens as with it, at the full vocabulary and at one and many rows, and a top_k
// row under such inputs keeps what its output held, which shows the kernel did not run (the CPU backend refuses
// such inputs).
TEST_F(SamplerTest, WithoutTopKOrTopPRowsTheFilteredKernelIsSkipped) {
  std::mt19937 rng(61);
  const int64_t vocab = 151936;
  std::normal_distribution<float> normal(0.0f, 2.0f);
  auto sample = [&](const Tensor& logits, SamplerInputs in, bool any_top_k_or_top_p, int rows) {
    in.any_top_k_or_top_p = any_top_k_or_top_p;
    const std::vector<int32_t> sentinel(static_cast<size_t>(rows), -7);
    Tensor ids = gpu_raw(sentinel, DType::I32, {rows});
    gpu().sample(logits, in, ids);
    return read_gpu_i32(ids);
  };
  for (int rows : {1, 5, 40}) {
    SamplerRows r;
    for (int i = 0; i < rows; ++i) r.add(i % 3 == 0 ? 0.0f : 0.8f, 0, 1.0f, i % 3 == 2 ? 0.05f : 0.0f, 11 * i, 7 + i);
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    for (float& x : logits) x = normal(rng);
    const Tensor x = gpu_raw(logits, DType::F32, {rows, vocab});
    EXPECT_EQ(sample(x, gpu_inputs(r), false, rows), sample(x, gpu_inputs(r), true, rows)) << rows << " rows";
  }
  SamplerRows top_k;
  top_k.add(0.8f, 20, 1.0f, 0.0f, 5, 3);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& x : logits) x = normal(rng);
  const Tensor x = gpu_raw(logits, DType::F32, {1, vocab});
  EXPECT_EQ(sample(x, gpu_inputs(top_k), false, 1), std::vector<int32_t>{-7});
  EXPECT_NE(sample(x, gpu_inputs(top_k), true, 1), std::vector<int32_t>{-7});
}

// Vocabularies that do not split into float4 (scalar loads), that fill a cluster exactly, that exceed it
// (auto takes the chunked path) and tiny ones (a one-block cluster with idle threads).
TEST_F(PlainPaths, OddVocabularies) {
  for (int64_t vocab : {int64_t{8}, int64_t{1003}, int64_t{8193}, int64_t{151937}, int64_t{163840}, int64_t{170001}}) {
    const int rows = 9;
    auto logits = random_logits(rows, vocab, 2.0f);
    // Row 2 (greedy): a tie for the maximum in different blocks; the lower index wins.
    const float top = *std::max_element(logits.begin() + 2 * vocab, logits.begin() + 3 * vocab) + 1.0f;
    logits[2 * vocab + vocab - 1] = top;
    logits[2 * vocab + vocab / 3] = top;
    // Row 5: every logit masked but two.
    std::fill(logits.begin() + 5 * vocab, logits.begin() + 6 * vocab, -INFINITY);
    logits[5 * vocab + vocab - 1] = 0.5f;
    logits[5 * vocab + vocab / 2] = 0.25f;
    // Row 6: all NaN but one; NaN never wins.
    std::fill(logits.begin() + 6 * vocab, logits.begin() + 7 * vocab, NAN);
    logits[6 * vocab + vocab / 4] = -1.0f;
    const SamplerRows r = plain_rows(rows, 40);
    expect_paths_agree(logits, vocab, r, 1, "vocab " + std::to_string(vocab));
    const auto got = sample_gpu(logits, vocab, r);
    EXPECT_EQ(got[2], vocab / 3) << "vocab " << vocab;
    EXPECT_TRUE(got[5] == vocab - 1 || got[5] == vocab / 2) << "vocab " << vocab;
    EXPECT_EQ(got[6], vocab / 4) << "vocab " << vocab;
  }
}

// Rows with nothing kept under sampling (z = -inf everywhere) fall back to greedy on both paths.
TEST_F(PlainPaths, NothingKeptFallsBackToGreedy) {
  const int64_t vocab = 151936;
  const int rows = 3;
  std::vector<float> logits(rows * vocab, -3e38f);
  logits[17] = -2e38f;
  logits[vocab + vocab - 2] = -1e38f;
  std::fill(logits.begin() + 2 * vocab, logits.end(), -INFINITY);
  SamplerRows r;
  for (int i = 0; i < rows; ++i) r.add(0.01f, -1, 1.0f, 0.1f * i, 5, i);
  expect_paths_agree(logits, vocab, r, 0, "nothing kept");
  const auto got = sample_gpu(logits, vocab, r);
  EXPECT_EQ(got[0], 17);
  EXPECT_EQ(got[1], vocab - 2);
  EXPECT_EQ(got[2], 0);
}

SamplerRows filtered_rows(int rows, int32_t step_base) {
  SamplerRows r;
  // top_k around the candidate list's limits (1024 thread keys), top_p alone and combined, with min_p.
  const int top_ks[] = {1, 20, 50, 1000, 1024, 1025, 5000, -1};
  const float top_ps[] = {1.0f, 0.9f, 1.0f, 0.95f, 1.0f, 0.8f, 0.99f, 0.9f};
  for (int i = 0; i < rows; ++i) {
    const float t = i % 3 == 0 ? 0.6f : 1.1f;
    r.add(t, top_ks[i % 8], top_ps[i % 8], i % 5 == 4 ? 0.01f : 0.0f, 3000 + i, step_base + i);
  }
  return r;
}

TEST_F(SamplerTest, FilteredManyRowsMatchCpu) {
  const int64_t vocab = 151936;
  for (int rows : {1, 3, 64}) {
    const auto logits = random_logits(rows, vocab, 2.5f);
    const SamplerRows r = filtered_rows(rows, 1);
    const auto got = sample_gpu(logits, vocab, r);
    const auto want = sample_cpu(logits, vocab, r);
    int mismatches = 0;
    for (int i = 0; i < rows; ++i) {
      if (got[i] != want[i]) {
        ++mismatches;
        std::printf("rows %d row %d: gpu %d cpu %d\n", rows, i, got[i], want[i]);
      }
    }
    EXPECT_LE(mismatches, 1) << "rows " << rows;
  }
}

// Four distinct values, each ~38000 times: rows with top_k 40000, or top_p alone over the ties, overflow the
// candidate list and take the radix-select fallback; the others exercise the list with exact ties. Both
// must give the CPU's answer (ties at the top_k threshold go to the lower index, so the kept set is exact).
TEST_F(SamplerTest, FilteredTiesTakeTheFallback) {
  const int64_t vocab = 151936;
  const int rows = 8;
  std::vector<float> logits(rows * vocab);
  for (int r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i) logits[r * vocab + i] = static_cast<float>(i % 4);  // 4 values
  }
  SamplerRows rs;
  const int top_ks[] = {5, 300, 40000, -1, 7, 1024, 1, 50};
  const float top_ps[] = {1.0f, 0.9f, 1.0f, 0.3f, 0.5f, 1.0f, 0.9f, 0.999f};
  for (int i = 0; i < rows; ++i) rs.add(1.0f, top_ks[i], top_ps[i], 0.0f, 50 + i, i);
  const auto got = sample_gpu(logits, vocab, rs);
  EXPECT_EQ(got, sample_cpu(logits, vocab, rs));
  // top_k 5 among ties: the five lowest indices of value 3.
  EXPECT_TRUE(got[0] % 4 == 3 && got[0] < 20) << got[0];
  EXPECT_EQ(got[6], 3);  // top_k 1: the lowest index of the largest value
}

// The same overflow construction as LogprobsTest.CandidateOverflowTakesTheFallback (100 of the 512 threads
// own only large, spread-out logits), with top_k = 256 and a top_p alone over it.
TEST_F(SamplerTest, FilteredCandidateOverflowMatchesCpu) {
  const int64_t vocab = 151936;
  const int rows = 4;
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> logits(rows * vocab);
  for (int r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i) {
      const int64_t group = i / 4, thread = group % 512, m = group / 512, q = i % 4;
      logits[r * vocab + i] =
          thread < 100 ? 20.0f + 0.05f * static_cast<float>(m) + 0.01f * static_cast<float>(q) : dist(rng_);
    }
  }
  SamplerRows rs;
  rs.add(1.0f, 256, 1.0f, 0.0f, 1, 1);
  rs.add(1.0f, 256, 0.5f, 0.0f, 2, 2);
  rs.add(1.0f, -1, 0.9f, 0.0f, 3, 3);
  rs.add(0.5f, 300, 0.95f, 0.01f, 4, 4);
  const auto got = sample_gpu(logits, vocab, rs);
  const auto want = sample_cpu(logits, vocab, rs);
  int mismatches = 0;
  for (int i = 0; i < rows; ++i) mismatches += got[i] != want[i];
  EXPECT_LE(mismatches, 1);
}

// The full-vocabulary plain path uses a 16-block (non-portable) cluster: it must capture into a graph and
// replay to the eager result, with the filtered rows alongside.
TEST_F(SamplerTest, FullVocabCapturesIntoAGraph) {
  const int64_t vocab = 151936;
  const int rows = 64;
  const auto logits = random_logits(rows, vocab, 2.0f);
  SamplerRows r = plain_rows(rows, 77);
  r.top_k[5] = 40;
  r.top_p[6] = 0.9f;
  const Tensor g_logits = gpu_raw(logits, DType::F32, {rows, vocab});
  const SamplerInputs in = gpu_inputs(r);
  Tensor ids = gpu_empty(DType::I32, {rows});
  gpu().sample(g_logits, in, ids);
  gpu().synchronize();
  const auto eager = read_gpu_i32(ids);
  std::vector<int32_t> poison(rows, -7);
  gpu().upload(poison.data(), ids.data, ids.bytes());
  CudaGraph graph = gpu().capture([&] { gpu().sample(g_logits, in, ids); });
  ASSERT_FALSE(graph.empty());
  gpu().replay(graph);
  gpu().synchronize();
  EXPECT_EQ(read_gpu_i32(ids), eager);
  EXPECT_EQ(eager, sample_gpu(logits, vocab, r));
}

TEST_F(SamplerTest, FilteredSmallVocabManyRows) {
  for (int64_t vocab : {int64_t{6}, int64_t{1003}, int64_t{4097}}) {
    const int rows = 257;
    const auto logits = random_logits(rows, vocab, 2.0f);
    const SamplerRows r = filtered_rows(rows, 9);
    const auto got = sample_gpu(logits, vocab, r);
    const auto want = sample_cpu(logits, vocab, r);
    int mismatches = 0;
    for (int i = 0; i < rows; ++i) mismatches += got[i] != want[i];
    EXPECT_LE(mismatches, 1) << "vocab " << vocab;
  }
}

// --- sample_shard: sample()'s pick on one vocabulary shard (tensor parallelism) ---

// Greedy and plain temperature rows (sample_shard takes no filters), each with its own seed and step.
SamplerRows shard_rows(int rows, int32_t step_base) {
  SamplerRows r;
  const float temps[] = {0.6f, 1.0f, 0.0f, 1.7f, 0.3f};
  for (int i = 0; i < rows; ++i) r.add(temps[i % 5], -1, 1.0f, 0.0f, 9000 + 13 * i, step_base + i);
  return r;
}

// Rows 1..4 (when present) get the awkward cases; the rest stay random.
void add_special_rows(std::vector<float>& logits, int64_t vocab, int64_t rows) {
  auto row = [&](int64_t r) { return logits.begin() + r * vocab; };
  if (rows > 1) {  // T = 1: the first 60% masked (whole shards with nothing), a few NaN
    std::fill(row(1), row(1) + vocab * 3 / 5, -INFINITY);
    row(1)[vocab - 2] = NAN;
    row(1)[vocab * 4 / 5] = NAN;
  }
  if (rows > 2) {  // greedy: a tie for the maximum in different shards; the lower index wins
    const float top = *std::max_element(row(2), row(2) + vocab) + 1.0f;
    row(2)[vocab - 1] = top;
    row(2)[vocab / 3] = top;
  }
  if (rows > 3) {  // T = 1.7: two +inf logits in different shards tie at key +inf; the lower index wins
    row(3)[vocab / 5] = INFINITY;
    row(3)[vocab * 4 / 5] = INFINITY;
  }
  if (rows > 4) {  // T = 0.3, peaked as a real model: most of the noise is pruned
    for (int j = 0; j < 6; ++j) row(4)[(j * 7919 + 17) % vocab] += 12.0f + 3.0f * j;
  }
}

class ShardedSampling : public SamplerTest {
 protected:
  // One shard through an explicit plain path, with the arguments CudaBackend::sample_shard launches with.
  ShardPicks shard_via(const Tensor& part, int64_t begin, int64_t valid, const SamplerInputs& in, Buffer& workspace,
                       cuda::PlainSamplerPath path) {
    const int64_t rows = part.dim(0);
    Tensor key = gpu_empty(DType::F32, {rows});
    Tensor token = gpu_empty(DType::I32, {rows});
    const cuda::SamplerArgs args = CudaBackend::sample_shard_args(part, begin, valid, in, key, token);
    cuda::launch_sample_via(args, workspace.data(), workspace.bytes(), gpu().stream(), path);
    gpu().synchronize();
    return {read_gpu(key), read_gpu_i32(token)};
  }

  // Splits logits [R, vocab] into `parts` shards of ceil(vocab / parts) columns (the last padded with +1e30,
  // or empty) and checks, per shard, that both GPU paths agree bit for bit and match the CPU's sample_shard
  // up to fp32 rounding of logf, and, merged, that the shards give the GPU sample() of the whole rows exactly.
  void check_split(const std::vector<float>& logits, int64_t vocab, const SamplerRows& r, int parts) {
    const int64_t rows = r.rows();
    const int64_t chunk = (vocab + parts - 1) / parts;
    const std::string what =
        "vocab " + std::to_string(vocab) + " rows " + std::to_string(rows) + " P " + std::to_string(parts);
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, gpu().device_index());
    const SamplerInputs in = gpu_inputs(r);
    std::vector<ShardPicks> shards;
    for (int p = 0; p < parts; ++p) {
      const int64_t begin = p * chunk, valid = shard_valid(vocab, begin, chunk);
      const std::string shard = what + " shard " + std::to_string(p);
      const Tensor part = gpu_raw(shard_columns(logits, vocab, rows, begin, chunk, 1e30f), DType::F32, {rows, chunk});
      const ShardPicks got = check_shard_paths(part, begin, valid, in, major, shard);
      check_shard_against_cpu(got, logits, vocab, begin, chunk, valid, r, shard);
      shards.push_back(got);
    }
    check_merged(shards, logits, vocab, r, what);
  }

  // One shard through sample_shard, and through each explicit plain path the device has: all bit for bit
  // the same. Returns sample_shard's picks.
  ShardPicks check_shard_paths(const Tensor& part, int64_t begin, int64_t valid, const SamplerInputs& in, int major,
                               const std::string& shard) {
    const int64_t rows = part.dim(0);
    Tensor key = gpu_empty(DType::F32, {rows});
    Tensor token = gpu_empty(DType::I32, {rows});
    gpu().sample_shard(part, begin, valid, in, key, token);
    const ShardPicks got{read_gpu(key), read_gpu_i32(token)};
    Buffer workspace = gpu().allocate(
        std::max<size_t>(cuda::sampler_workspace_bytes(static_cast<int>(rows), static_cast<int>(valid)), 16));
    const ShardPicks chunked = shard_via(part, begin, valid, in, workspace, cuda::PlainSamplerPath::kChunked);
    EXPECT_EQ(chunked.token, got.token) << shard << ": the chunked path";
    EXPECT_EQ(chunked.key, got.key) << shard << ": the chunked path";
    if (major >= 9 && valid <= 163840) {
      const ShardPicks clustered = shard_via(part, begin, valid, in, workspace, cuda::PlainSamplerPath::kCluster);
      EXPECT_EQ(clustered.token, got.token) << shard << ": the cluster path";
      EXPECT_EQ(clustered.key, got.key) << shard << ": the cluster path";
    }
    return got;
  }

  // The CPU reference: the same tokens and keys, but for logf's last bits. A token may differ only where
  // the shard's two best keys are that close (a near tie), so the keys must still agree.
  void check_shard_against_cpu(const ShardPicks& got, const std::vector<float>& logits, int64_t vocab, int64_t begin,
                               int64_t chunk, int64_t valid, const SamplerRows& r, const std::string& shard) {
    const int64_t rows = r.rows();
    const ShardPicks want = sample_shard_cpu(logits, vocab, begin, chunk, 1e30f, r);
    int mismatches = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const bool none = got.token[i] == INT32_MAX;
      EXPECT_TRUE(none || (got.token[i] >= begin && got.token[i] < begin + valid)) << shard << " row " << i;
      EXPECT_EQ(none, got.key[i] == -INFINITY) << shard << " row " << i;
      if (r.temperature[i] > 0.0f && std::isfinite(want.key[i])) {
        EXPECT_NEAR(got.key[i], want.key[i], 1e-5 * std::max(1.0f, std::fabs(want.key[i]))) << shard << " row " << i;
      } else {
        EXPECT_EQ(got.key[i], want.key[i]) << shard << " row " << i;  // greedy (the raw logit), +-inf
      }
      if (got.token[i] != want.token[i]) {
        ++mismatches;
        std::printf("%s row %ld: gpu %d (key %.9g) cpu %d (key %.9g)\n", shard.c_str(), static_cast<long>(i),
                    got.token[i], got.key[i], want.token[i], want.key[i]);
      }
    }
    EXPECT_LE(mismatches, 1 + rows / 256) << shard;
  }

  // The shards merged give sample() of the whole rows exactly; a greedy row's key is its raw logit.
  void check_merged(const std::vector<ShardPicks>& shards, const std::vector<float>& logits, int64_t vocab,
                    const SamplerRows& r, const std::string& what) {
    const int64_t rows = r.rows();
    const ShardPicks merged = merge_shards(shards, rows);
    const auto whole = sample_gpu(logits, vocab, r);
    EXPECT_EQ(merged.token, whole) << what << ": merged shards != sample()";
    for (int64_t i = 0; i < rows; ++i) {
      if (!(r.temperature[i] > 0.0f)) {
        EXPECT_EQ(merged.key[i], logits[i * vocab + whole[i]]) << what << " row " << i;
      }
    }
  }
};

TEST_F(ShardedSampling, FullVocabMergesToSample) {
  const int64_t vocab = 151936;  // Qwen3: C = 75968 for 2 shards, 50646 for 3 (padded by 2), 37984 for 4
  for (int rows : {1, 5, 64, 256}) {
    // Peaked rows for the larger counts (a real model's shape) keep the CPU reference quick.
    auto logits = random_logits(rows, vocab, rows > 64 ? 1.5f : 3.0f);
    if (rows > 64) {
      for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < 8; ++j) logits[r * vocab + rng_() % vocab] += 10.0f + 2.0f * j;
      }
    }
    add_special_rows(logits, vocab, rows);
    const SamplerRows r = shard_rows(rows, 3 * rows);
    for (int parts : {2, 3, 4}) check_split(logits, vocab, r, parts);
  }
}

// Small odd vocabularies: scalar loads, a one-block cluster, and with 40 shards an empty last one.
TEST_F(ShardedSampling, SmallOddVocabMergesToSample) {
  for (int64_t vocab : {int64_t{1003}, int64_t{8191}}) {
    for (int rows : {3, 256}) {
      auto logits = random_logits(rows, vocab, 2.0f);
      add_special_rows(logits, vocab, rows);
      const SamplerRows r = shard_rows(rows, 11);
      for (int parts : {2, 3, 4, 40}) check_split(logits, vocab, r, parts);
    }
  }
}

// Rows where nothing has probability: every shard reports -inf / INT32_MAX (no greedy fallback per shard).
TEST_F(ShardedSampling, NothingToSampleGivesNone) {
  const int64_t vocab = 151936, chunk = 75968;
  const int rows = 3;
  std::vector<float> logits(rows * vocab, -INFINITY);
  std::fill(logits.begin() + vocab, logits.begin() + 2 * vocab, NAN);
  std::fill(logits.begin() + 2 * vocab, logits.end(), -3e38f);  // finite, but -3e38 / 0.01 = -inf
  SamplerRows r;
  r.add(1.0f, -1, 1.0f, 0.0f, 1, 1);
  r.add(0.0f, -1, 1.0f, 0.0f, 1, 1);
  r.add(0.01f, -1, 1.0f, 0.0f, 1, 1);
  for (int64_t begin : {int64_t{0}, chunk}) {
    const ShardPicks got = sample_shard_gpu(logits, vocab, begin, chunk, 1e30f, r);
    EXPECT_EQ(got.token, std::vector<int32_t>(rows, INT32_MAX));
    EXPECT_EQ(got.key, std::vector<float>(rows, -INFINITY));
  }
}

TEST_F(ShardedSampling, RejectsBadArguments) {
  const int64_t rows = 2, chunk = 10;
  const SamplerRows r = shard_rows(rows, 0);
  const SamplerInputs in = gpu_inputs(r);
  const Tensor part = gpu_raw(std::vector<float>(rows * chunk, 0.5f), DType::F32, {rows, chunk});
  Tensor key = gpu_empty(DType::F32, {rows});
  Tensor token = gpu_empty(DType::I32, {rows});
  Tensor short_token = gpu_empty(DType::I32, {rows - 1});
  EXPECT_NO_THROW(gpu().sample_shard(part, 90, chunk, in, key, token));
  EXPECT_THROW(gpu().sample_shard(part, 90, chunk + 1, in, key, token), EngineError);
  EXPECT_THROW(gpu().sample_shard(part, -1, chunk, in, key, token), EngineError);
  EXPECT_THROW(gpu().sample_shard(part, 0, chunk, in, key, short_token), EngineError);
  EXPECT_THROW(gpu().sample_shard(part, 0, chunk, in, token, token), EngineError);
  gpu().synchronize();
}

// Both ranks' shards of Qwen3's vocabulary captured into one graph (R = 4: the cluster path on sm_90;
// R = 64: the chunked path), replayed on new logits: the eager result, bit for bit.
TEST_F(ShardedSampling, CapturesIntoAGraph) {
  const int64_t vocab = 151936, chunk = 75968;
  for (int rows : {4, 64}) {
    const SamplerRows r = shard_rows(rows, 21);
    const SamplerInputs in = gpu_inputs(r);
    Tensor parts[2] = {gpu_empty(DType::F32, {rows, chunk}), gpu_empty(DType::F32, {rows, chunk})};
    Tensor keys[2] = {gpu_empty(DType::F32, {rows}), gpu_empty(DType::F32, {rows})};
    Tensor tokens[2] = {gpu_empty(DType::I32, {rows}), gpu_empty(DType::I32, {rows})};
    auto enqueue = [&] {
      for (int p = 0; p < 2; ++p) gpu().sample_shard(parts[p], p * chunk, chunk, in, keys[p], tokens[p]);
    };
    auto upload = [&](const std::vector<float>& logits) {
      for (int p = 0; p < 2; ++p) {
        const auto part = shard_columns(logits, vocab, rows, p * chunk, chunk, 0.0f);
        gpu().upload(part.data(), parts[p].data, parts[p].bytes());
      }
    };
    upload(random_logits(rows, vocab, 2.0f));
    enqueue();  // warm up eagerly
    gpu().synchronize();
    CudaGraph graph = gpu().capture(enqueue);
    ASSERT_FALSE(graph.empty());
    for (int round = 0; round < 2; ++round) {
      const auto logits = random_logits(rows, vocab, 2.0f);
      upload(logits);
      std::vector<unsigned char> ff(static_cast<size_t>(rows) * 4, 0xFF);
      for (int p = 0; p < 2; ++p) {
        gpu().upload(ff.data(), keys[p].data, keys[p].bytes());
        gpu().upload(ff.data(), tokens[p].data, tokens[p].bytes());
      }
      gpu().replay(graph);
      gpu().synchronize();
      std::vector<ShardPicks> replayed;
      for (int p = 0; p < 2; ++p) replayed.push_back({read_gpu(keys[p]), read_gpu_i32(tokens[p])});
      enqueue();
      gpu().synchronize();
      for (int p = 0; p < 2; ++p) {
        EXPECT_EQ(replayed[p].key, read_gpu(keys[p])) << "rows " << rows << " round " << round << " shard " << p;
        EXPECT_EQ(replayed[p].token, read_gpu_i32(tokens[p])) << "rows " << rows << " round " << round;
      }
      EXPECT_EQ(merge_shards(replayed, rows).token, sample_gpu(logits, vocab, r)) << "rows " << rows;
    }
  }
}

}  // namespace
}  // namespace nanovllm::test
