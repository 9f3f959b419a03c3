// Token sampling, one row of logits F32 [R, V] at a time. The CUDA sampler follows the same steps, so that
// with the same seed both backends draw the same token wherever fp32 rounding does not decide a near tie.
//
// For row r, with T = temperature[r]:
//   1. T <= 0: greedy, the argmax of the raw logits (lowest index on ties; NaN never wins). Nothing else
//      applies, and no random number is drawn.
//   2. z_i = logit_i / T in fp32 (a division, not a multiply by 1/T). Tokens whose z is -inf or NaN have no
//      probability and are never kept (if no token is left, the row falls back to greedy).
//   3. min_p > 0: keep token i only if p_i >= min_p * p_max, evaluated as exp(z_i - z_max) >= min_p (the
//      most likely token always stays, even for min_p > 1).
//   4. top_k > 0: keep the top_k largest z among those kept; ties at the threshold go to the lower index, so
//      exactly min(top_k, kept) remain.
//   5. top_p < 1: the kept tokens' probabilities are renormalised over the kept set (softmax of their z);
//      sorted by probability descending (lower index first on ties), the smallest prefix whose cumulative
//      probability (summed in double) reaches top_p is kept, at least one token.
//   6. Gumbel-max: the token is the argmax over the kept tokens of z_i - log(-log(u_i)), with
//      u_i = min(philox_uniform(seed[r], step[r], i), 1 - 2^-24) (lowest index on an exact tie). This draws
//      from softmax(z) restricted to the kept set, and is a pure function of (seed, step, logits).
//      philox_uniform is already in (0, 1 - 2^-24]; the clamp only guarantees, whatever the generator, the
//      finite noise bound (<= 16.64) that lets the search skip tokens which cannot win.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/philox.h"

namespace nanovllm {

namespace {

// The largest float below 1: the Gumbel noise of u stays finite (at most -log(-log(1 - 2^-24)) ~ 16.64).
constexpr float kLargestUniform = 0x1.fffffep-1f;
// An upper bound of that noise, with room for rounding.
constexpr float kMaxGumbel = 17.0f;
// top_p first sorts this many of the most likely tokens, and more only if their mass falls short.
constexpr size_t kFirstTopPCandidates = 1024;

struct RowControls {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  uint64_t seed;
  uint32_t step;
};

int32_t greedy_token(const float* logits, int64_t vocab) {
  int64_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) {
    if (logits[i] > best_value) {
      best_value = logits[i];
      best = i;
    }
  }
  return static_cast<int32_t>(best);
}

// scaled and kept are scratch of V elements owned by the calling thread.
int32_t sample_row(const float* logits, int64_t vocab, const RowControls& c, std::vector<float>& scaled,
                   std::vector<int32_t>& kept) {
  if (!(c.temperature > 0.0f)) return greedy_token(logits, vocab);

  float z_max = -std::numeric_limits<float>::infinity();
  int32_t top_index = 0;  // the lowest index of the largest z
  for (int64_t i = 0; i < vocab; ++i) {
    scaled[i] = logits[i] / c.temperature;
    if (scaled[i] > z_max) {
      z_max = scaled[i];
      top_index = static_cast<int32_t>(i);
    }
  }
  if (!(z_max > -std::numeric_limits<float>::infinity())) return greedy_token(logits, vocab);

  kept.clear();
  const bool use_min_p = c.min_p > 0.0f;
  for (int64_t i = 0; i < vocab; ++i) {
    const float z = scaled[i];
    if (!(z > -std::numeric_limits<float>::infinity())) continue;                // -inf or NaN
    if (use_min_p && z != z_max && !(std::exp(z - z_max) >= c.min_p)) continue;  // the top token always stays
    kept.push_back(static_cast<int32_t>(i));
  }

  // Larger z first, then lower index: the order both top_k and top_p walk.
  const auto before = [&scaled](int32_t a, int32_t b) {
    return scaled[a] > scaled[b] || (scaled[a] == scaled[b] && a < b);
  };
  if (c.top_k > 0 && static_cast<size_t>(c.top_k) < kept.size()) {
    std::nth_element(kept.begin(), kept.begin() + c.top_k, kept.end(), before);
    kept.resize(static_cast<size_t>(c.top_k));
  }
  if (c.top_p < 1.0f) {
    double total = 0.0;
    for (int32_t i : kept) total += std::exp(static_cast<double>(scaled[i]) - z_max);
    // Walk the tokens in `before` order, sorting only as far as needed: the first `sorted` of kept are the
    // largest, in order (what a full sort would put there), and the prefix usually ends early.
    size_t sorted = std::min(kept.size(), kFirstTopPCandidates);
    for (;;) {
      if (sorted < kept.size()) std::nth_element(kept.begin(), kept.begin() + sorted, kept.end(), before);
      std::sort(kept.begin(), kept.begin() + sorted, before);
      double cumulative = 0.0;
      size_t prefix = 0;
      do {  // at least one token, whatever top_p is
        cumulative += std::exp(static_cast<double>(scaled[kept[prefix]]) - z_max) / total;
        ++prefix;
      } while (prefix < sorted && cumulative < static_cast<double>(c.top_p));
      if (cumulative >= static_cast<double>(c.top_p) || sorted == kept.size()) {
        kept.resize(prefix);
        break;
      }
      sorted = std::min(kept.size(), sorted * 4);
    }
  }

  // Gumbel-max. Every filter keeps the most likely token (top_index), so its value starts the search, and a
  // token whose z is more than the largest possible noise below the best so far cannot win: skipping it
  // changes nothing (rounding is monotonic, and the noise of a clamped u is at most ~16.64 < kMaxGumbel).
  const auto noisy = [&](int32_t i) {
    const float u = std::min(philox_uniform(c.seed, c.step, static_cast<uint32_t>(i)), kLargestUniform);
    return scaled[i] - std::log(-std::log(u));
  };
  int32_t best = top_index;
  float best_value = noisy(top_index);
  for (int32_t i : kept) {
    if (scaled[i] + kMaxGumbel < best_value) continue;
    const float value = noisy(i);
    if (value > best_value || (value == best_value && i < best)) {
      best_value = value;
      best = i;
    }
  }
  return best;
}

}  // namespace

void CpuBackend::sample(const Tensor& logits, const SamplerInputs& in, Tensor& token_ids) {
  const char* op = "sample";
  cpu::require_dtype(logits, DType::F32, op, "logits");
  cpu::require_dtype(token_ids, DType::I32, op, "token_ids");
  const int64_t rows = logits.dim(0);
  const int64_t vocab = logits.row_elems();
  cpu::require(vocab > 0, op, "logits " + logits.shape_string() + " have no columns");
  cpu::require_vector(token_ids, rows, op, "token_ids");
  const std::pair<const Tensor*, DType> controls[] = {{&in.temperature, DType::F32}, {&in.top_k, DType::I32},
                                                      {&in.top_p, DType::F32},       {&in.min_p, DType::F32},
                                                      {&in.seed, DType::I64},        {&in.step, DType::I32}};
  const char* names[] = {"temperature", "top_k", "top_p", "min_p", "seed", "step"};
  for (int i = 0; i < 6; ++i) {
    cpu::require_dtype(*controls[i].first, controls[i].second, op, names[i]);
    cpu::require_vector(*controls[i].first, rows, op, names[i]);
  }
  const float* x = logits.as<const float>();
  int32_t* out = token_ids.as<int32_t>();
#pragma omp parallel num_threads(num_threads_) if (rows > 1)
  {
    std::vector<float> scaled(static_cast<size_t>(vocab));
    std::vector<int32_t> kept;
    kept.reserve(static_cast<size_t>(vocab));
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < rows; ++r) {
      const RowControls c{in.temperature.as<const float>()[r],
                          in.top_k.as<const int32_t>()[r],
                          in.top_p.as<const float>()[r],
                          in.min_p.as<const float>()[r],
                          static_cast<uint64_t>(in.seed.as<const int64_t>()[r]),
                          static_cast<uint32_t>(in.step.as<const int32_t>()[r])};
      out[r] = sample_row(x + r * vocab, vocab, c, scaled, kept);
    }
  }
}

}  // namespace nanovllm
