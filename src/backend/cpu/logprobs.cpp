// Log-probabilities of the raw logits: log_softmax(x)_i = x_i - (max + log(sum_j exp(x_j - max))), the sum
// kept in double. Each row gives the target token's logprob and, when k > 0, the k most likely tokens in
// descending order (lowest id first on ties). A target outside [0, V) (a row without one) gets NaN.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"

namespace nanovllm {

namespace {

double log_sum_exp(const float* x, int64_t vocab) {
  float max_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) max_value = std::max(max_value, x[i]);
  if (std::isinf(max_value)) return max_value;  // all -inf (or +inf present): no finite normaliser
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(x[i]) - max_value);
  return max_value + std::log(sum);
}

// The k best ids of the row, best first; insertion into a sorted list of k, since k is small (<= ~20).
void top_k_ids(const float* x, int64_t vocab, int k, std::vector<int32_t>& best) {
  best.clear();
  const auto better = [x](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  for (int64_t i = 0; i < vocab; ++i) {
    if (best.size() == static_cast<size_t>(k) && !better(i, best.back())) continue;
    if (best.size() == static_cast<size_t>(k)) best.pop_back();
    size_t at = best.size();
    while (at > 0 && better(i, best[at - 1])) --at;
    best.insert(best.begin() + static_cast<std::ptrdiff_t>(at), static_cast<int32_t>(i));
  }
}

}  // namespace

void CpuBackend::logprobs(const Tensor& logits, const Tensor& targets, int k, Tensor& target_logprob, Tensor& top_ids,
                          Tensor& top_logprobs) {
  const char* op = "logprobs";
  cpu::require_dtype(logits, DType::F32, op, "logits");
  const int64_t rows = logits.dim(0);
  const int64_t vocab = logits.row_elems();
  cpu::require(vocab > 0, op, "logits " + logits.shape_string() + " have no columns");
  cpu::require_dtype(targets, DType::I32, op, "targets");
  cpu::require_vector(targets, rows, op, "targets");
  cpu::require_dtype(target_logprob, DType::F32, op, "target_logprob");
  cpu::require_vector(target_logprob, rows, op, "target_logprob");
  cpu::require(k >= 0 && k <= vocab, op, "k = " + std::to_string(k) + " is outside [0, " + std::to_string(vocab) + "]");
  if (k > 0) {
    cpu::require_dtype(top_ids, DType::I32, op, "top_ids");
    cpu::require_dtype(top_logprobs, DType::F32, op, "top_logprobs");
    cpu::require_matrix(top_ids, rows, k, op, "top_ids");
    cpu::require_matrix(top_logprobs, rows, k, op, "top_logprobs");
  }
  const float* x = logits.as<const float>();
  const int32_t* target = targets.as<const int32_t>();
  float* target_out = target_logprob.as<float>();
#pragma omp parallel num_threads(num_threads_) if (rows > 1)
  {
    std::vector<int32_t> best;
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x + r * vocab;
      const double normaliser = log_sum_exp(row, vocab);
      const int32_t t = target[r];
      target_out[r] =
          (t >= 0 && t < vocab) ? static_cast<float>(row[t] - normaliser) : std::numeric_limits<float>::quiet_NaN();
      if (k == 0) continue;
      top_k_ids(row, vocab, k, best);
      for (int j = 0; j < k; ++j) {
        top_ids.as<int32_t>()[r * k + j] = best[static_cast<size_t>(j)];
        top_logprobs.as<float>()[r * k + j] = static_cast<float>(row[best[static_cast<size_t>(j)]] - normaliser);
      }
    }
  }
}

}  // namespace nanovllm
