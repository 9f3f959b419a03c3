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

// out[i] = a · b_i for four vectors b_0..b_3: a is loaded once for all four, and the four sums are independent
// chains.
NANOVLLM_CPU_INLINE void dot4(const float* a, const float* b0, const float* b1, const float* b2, const float* b3,
                              int64_t n, float* out) {
  Vec8 acc0{}, acc1{}, acc2{}, acc3{};
  int64_t i = 0;
  for (; i + kVecWidth <= n; i += kVecWidth) {
    const Vec8 av = load8(a + i);
    acc0 += av * load8(b0 + i);
    acc1 += av * load8(b1 + i);
    acc2 += av * load8(b2 + i);
    acc3 += av * load8(b3 + i);
  }
  float s0 = sum8(acc0), s1 = sum8(acc1), s2 = sum8(acc2), s3 = sum8(acc3);
  for (; i < n; ++i) {
    s0 += a[i] * b0[i];
    s1 += a[i] * b1[i];
    s2 += a[i] * b2[i];
    s3 += a[i] * b3[i];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

// out[0, n) += Σ_j weights[j] * rows[j * stride + (0, n)] for j < count. Works on 64 columns at a time with the
// partial sums in registers, so out is read and written once per call instead of once per row.
NANOVLLM_CPU_INLINE void weighted_rows_add(const float* weights, const float* rows, int64_t stride, int64_t count,
                                           float* out, int64_t n) {
  constexpr int kVecs = 8;
  int64_t c = 0;
  for (; c + kVecs * kVecWidth <= n; c += kVecs * kVecWidth) {
    Vec8 acc[kVecs];
    for (int k = 0; k < kVecs; ++k) acc[k] = load8(out + c + k * kVecWidth);
    for (int64_t j = 0; j < count; ++j) {
      const float w = weights[j];
      const float* row = rows + j * stride + c;
      for (int k = 0; k < kVecs; ++k) acc[k] += w * load8(row + k * kVecWidth);
    }
    for (int k = 0; k < kVecs; ++k) store8(out + c + k * kVecWidth, acc[k]);
  }
  for (; c + kVecWidth <= n; c += kVecWidth) {
    Vec8 acc = load8(out + c);
    for (int64_t j = 0; j < count; ++j) acc += weights[j] * load8(rows + j * stride + c);
    store8(out + c, acc);
  }
  for (; c < n; ++c) {
    float acc = out[c];
    for (int64_t j = 0; j < count; ++j) acc += weights[j] * rows[j * stride + c];
    out[c] = acc;
  }
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
