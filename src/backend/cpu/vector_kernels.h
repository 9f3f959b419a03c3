#pragma once
// Small fp32 vector kernels for the hot loops (small-batch linear, attention), written with GCC/Clang vector
// extensions: 8 floats per vector, which become one AVX register in the AVX2 clone and two SSE registers in
// the baseline one. Callers mark their hot function NANOVLLM_CPU_MULTIVERSION so the AVX2+FMA clone is picked
// at run time where the CPU has it, while the binary still runs on any x86-64.
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NANOVLLM_CPU_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define NANOVLLM_CPU_MULTIVERSION
#endif

// Helpers of a multiversioned function must be inlined into it, or they stay compiled for the baseline ISA.
#if defined(__GNUC__) || defined(__clang__)
#define NANOVLLM_CPU_INLINE __attribute__((always_inline)) inline
#else
#define NANOVLLM_CPU_INLINE inline
#endif

namespace nanovllm::cpu {

using Vec8 = float __attribute__((vector_size(32)));
constexpr int64_t kVecWidth = 8;

NANOVLLM_CPU_INLINE Vec8 load8(const float* p) {
  Vec8 v;
  std::memcpy(&v, p, sizeof(v));  // unaligned load
  return v;
}

NANOVLLM_CPU_INLINE void store8(float* p, Vec8 v) { std::memcpy(p, &v, sizeof(v)); }

NANOVLLM_CPU_INLINE float sum8(Vec8 v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

// Four independent accumulators keep the FMA units busy instead of waiting on one serial chain.
NANOVLLM_CPU_INLINE float dot(const float* a, const float* b, int64_t n) {
  Vec8 acc0{}, acc1{}, acc2{}, acc3{};
  int64_t i = 0;
  for (; i + 4 * kVecWidth <= n; i += 4 * kVecWidth) {
    acc0 += load8(a + i) * load8(b + i);
    acc1 += load8(a + i + 8) * load8(b + i + 8);
    acc2 += load8(a + i + 16) * load8(b + i + 16);
    acc3 += load8(a + i + 24) * load8(b + i + 24);
  }
  for (; i + kVecWidth <= n; i += kVecWidth) acc0 += load8(a + i) * load8(b + i);
  float sum = sum8((acc0 + acc1) + (acc2 + acc3));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y += alpha * x
NANOVLLM_CPU_INLINE void axpy(float alpha, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kVecWidth <= n; i += kVecWidth) store8(y + i, load8(y + i) + alpha * load8(x + i));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

NANOVLLM_CPU_INLINE void scale_in_place(float alpha, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

}  // namespace nanovllm::cpu
