#pragma once
// RMSNorm of one row, as HF's Qwen3RMSNorm computes it in fp32: variance = mean(x²), then
// (x * rsqrt(variance + eps)) * weight. The sum of squares is accumulated in double so that the fp32 variance
// is the correctly rounded one (torch's vectorised fp32 reduction lands within an ulp or two of it).
#include <cmath>
#include <cstdint>

namespace nanovllm::cpu {

inline float inverse_rms(const float* x, int64_t n, float eps) {
  double sum_squares = 0.0;
#pragma omp simd reduction(+ : sum_squares)
  for (int64_t i = 0; i < n; ++i) sum_squares += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const float variance = static_cast<float>(sum_squares / static_cast<double>(n));
  return 1.0f / std::sqrt(variance + eps);
}

// out may alias x: every read of x happens before the first write.
inline void rms_norm_row(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const float scale = inverse_rms(x, n, eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * weight[i];
}

}  // namespace nanovllm::cpu
