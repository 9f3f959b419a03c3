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
//
// sample_shard (tensor parallelism) runs steps 1, 2 and 6 on the columns [0, valid) of one vocabulary shard,
// with the noise of the global token id vocab_start + i, and returns the winner with its key (the raw logit
// for greedy rows, z_i - log(-log(u_i)) otherwise). Both run pick_row (with the filters of steps 3-5 off for
// a shard), so the keys are the very floats sample() compares and the shards' best merge to sample()'s pick.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
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

// A winner: its key and its (shard-local) index; index -1 when nothing has probability.
struct Pick {
  float key;
  int64_t index;
};

// The argmax of logits[0, n): lowest index on ties; NaN and -inf never win (index -1 when nothing is above -inf).
Pick greedy_pick(const float* logits, int64_t n) {
  Pick best{-std::numeric_limits<float>::infinity(), -1};
  for (int64_t i = 0; i < n; ++i) {
    if (logits[i] > best.key) best = {logits[i], i};
  }
  return best;
}

int32_t greedy_token(const float* logits, int64_t vocab) {
  const Pick best = greedy_pick(logits, vocab);
  return best.index < 0 ? 0 : static_cast<int32_t>(best.index);
}

// scaled[i] = logits[i] / T for i < n (a division, not a multiply by 1/T). Returns the largest z and the
// lowest index holding it (index -1 when every z is -inf or NaN).
Pick scale_row(const float* logits, int64_t n, float temperature, std::vector<float>& scaled) {
  Pick top{-std::numeric_limits<float>::infinity(), -1};
  for (int64_t i = 0; i < n; ++i) {
    scaled[i] = logits[i] / temperature;
    if (scaled[i] > top.key) top = {scaled[i], i};
  }
  return top;
}

// The Gumbel-perturbed key of a token of scaled logit z: what the argmax compares. token is the global id.
float gumbel_key(float z, const RowControls& c, int64_t token) {
  const float u = std::min(philox_uniform(c.seed, c.step, static_cast<uint32_t>(token)), kLargestUniform);
  return z - std::log(-std::log(u));
}

// Gumbel-max over the kept indices (into scaled; noise of token_offset + index), lowest index on an exact
// tie. Every filter keeps the most likely token (top), so its key starts the search, and a token whose z is
// more than the largest possible noise below the best key so far cannot win: skipping it changes nothing
// (rounding is monotonic, and the noise of a clamped u is at most ~16.64 < kMaxGumbel).
Pick gumbel_argmax(const std::vector<float>& scaled, const std::vector<int32_t>& kept, const Pick& top,
                   const RowControls& c, int64_t token_offset) {
  Pick best{gumbel_key(top.key, c, token_offset + top.index), top.index};
  for (int32_t i : kept) {
    if (scaled[i] + kMaxGumbel < best.key) continue;
    const float key = gumbel_key(scaled[i], c, token_offset + i);
    if (key > best.key || (key == best.key && i < best.index)) best = {key, i};
  }
  return best;
}

// The pick of one row of n logits whose column 0 is global token token_offset (the noise is the global
// token's): greedy, or temperature scaling, min_p, top_k, top_p and the Gumbel argmax. index -1 when no
// token has probability (sample() then falls back to the raw argmax; a shard reports "none"). The key is
// what picks of different shards compare: the raw logit when greedy, else the Gumbel key. scaled and kept
// are scratch of n elements owned by the calling thread.
Pick pick_row(const float* logits, int64_t vocab, int64_t token_offset, const RowControls& c,
              std::vector<float>& scaled, std::vector<int32_t>& kept) {
  if (!(c.temperature > 0.0f)) return greedy_pick(logits, vocab);

  const Pick top = scale_row(logits, vocab, c.temperature, scaled);
  if (top.index < 0) return top;
  const float z_max = top.key;

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
  return gumbel_argmax(scaled, kept, top, c, token_offset);
}

// The six controls, each F32 / I32 / I64 of `rows` elements. sample_shard reads only temperature, seed and
// step (check_all false).
void check_controls(const SamplerInputs& in, int64_t rows, bool check_all, const char* op) {
  const struct {
    const Tensor* tensor;
    DType dtype;
    const char* name;
    bool used_by_shard;
  } controls[] = {{&in.temperature, DType::F32, "temperature", true},
                  {&in.top_k, DType::I32, "top_k", false},
                  {&in.top_p, DType::F32, "top_p", false},
                  {&in.min_p, DType::F32, "min_p", false},
                  {&in.seed, DType::I64, "seed", true},
                  {&in.step, DType::I32, "step", true}};
  for (const auto& control : controls) {
    if (!check_all && !control.used_by_shard) continue;
    cpu::require_dtype(*control.tensor, control.dtype, op, control.name);
    cpu::require_vector(*control.tensor, rows, op, control.name);
  }
}

RowControls controls_of(const SamplerInputs& in, int64_t r, bool shard) {
  if (shard) {  // plain temperature sampling: top_k, top_p and min_p off
    return {in.temperature.as<const float>()[r],
            0,
            1.0f,
            0.0f,
            static_cast<uint64_t>(in.seed.as<const int64_t>()[r]),
            static_cast<uint32_t>(in.step.as<const int32_t>()[r])};
  }
  return {in.temperature.as<const float>()[r],
          in.top_k.as<const int32_t>()[r],
          in.top_p.as<const float>()[r],
          in.min_p.as<const float>()[r],
          static_cast<uint64_t>(in.seed.as<const int64_t>()[r]),
          static_cast<uint32_t>(in.step.as<const int32_t>()[r])};
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
  check_controls(in, rows, true, op);
  if (!in.any_top_k_or_top_p) {  // the CUDA sampler would leave such a row unsampled
    for (int64_t r = 0; r < rows; ++r) {
      const RowControls c = controls_of(in, r, false);
      cpu::require(!uses_top_k_or_top_p(c.temperature, c.top_k, c.top_p), op,
                   "row " + std::to_string(r) + " has top_k or top_p on, but the inputs say no row has");
    }
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
      const float* row = x + r * vocab;
      const Pick pick = pick_row(row, vocab, 0, controls_of(in, r, false), scaled, kept);
      out[r] = pick.index >= 0 ? static_cast<int32_t>(pick.index) : greedy_token(row, vocab);
    }
  }
}

void CpuBackend::sample_shard(const Tensor& logits, int64_t vocab_start, int64_t valid, const SamplerInputs& in,
                              Tensor& best_key, Tensor& best_token) {
  const char* op = "sample_shard";
  cpu::require_dtype(logits, DType::F32, op, "logits");
  cpu::require_dtype(best_key, DType::F32, op, "best_key");
  cpu::require_dtype(best_token, DType::I32, op, "best_token");
  cpu::require(logits.ndim == 2, op, "logits " + logits.shape_string() + " must be [R, C]");
  const int64_t rows = logits.dim(0);
  const int64_t cols = logits.dim(1);
  cpu::require(valid >= 0 && valid <= cols, op,
               "valid " + std::to_string(valid) + " outside [0, " + std::to_string(cols) + "] for logits " +
                   logits.shape_string());
  cpu::require(vocab_start >= 0 && vocab_start + valid <= std::numeric_limits<int32_t>::max(), op,
               "vocab_start " + std::to_string(vocab_start) + " with " + std::to_string(valid) +
                   " tokens is outside the I32 token ids");
  cpu::require_vector(best_key, rows, op, "best_key");
  cpu::require_vector(best_token, rows, op, "best_token");
  check_controls(in, rows, false, op);
  const float* x = logits.as<const float>();
  float* keys = best_key.as<float>();
  int32_t* tokens = best_token.as<int32_t>();
#pragma omp parallel num_threads(num_threads_) if (rows > 1)
  {
    std::vector<float> scaled(static_cast<size_t>(valid));
    std::vector<int32_t> kept;
    kept.reserve(static_cast<size_t>(valid));
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < rows; ++r) {
      // The filters are off in shard mode (controls_of), so this is plain temperature sampling.
      const Pick best = pick_row(x + r * cols, valid, vocab_start, controls_of(in, r, true), scaled, kept);
      const bool none = best.index < 0;  // a pick with an index has a key above -inf
      keys[r] = none ? -std::numeric_limits<float>::infinity() : best.key;
      tokens[r] = none ? Backend::ShardPick::kNoToken : static_cast<int32_t>(vocab_start + best.index);
    }
  }
}

}  // namespace nanovllm
