#pragma once
// One row of RMSNorm per thread block, shared by norm.cu and the tensor-parallel all-reduce that is fused
// with the residual add and RMSNorm (parallel/peer_all_reduce.cu): both use this block shape and these
// steps, so their results are the same bit for bit. Each thread keeps kVecs 16-byte vectors of the row in
// registers (vector v = threadIdx.x + i * blockDim.x); math in fp32.
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/kernels.h"  // kMaxNormHidden

namespace nanovllm::cuda {

// Threads per row block: one per vector up to 1024, a multiple of 32.
inline int rms_norm_threads(int hidden) {
  const int nvec = hidden / 8;
  return nvec >= 1024 ? 1024 : ((nvec + 31) / 32) * 32;
}
// Vectors per thread: 1, or 2 above 8192 (up to kMaxNormHidden).
inline int rms_norm_vectors_per_thread(int hidden) { return hidden / 8 <= rms_norm_threads(hidden) ? 1 : 2; }

// residual += v, rounded to bf16 and stored; v becomes the stored value, the one the norm reads.
__device__ __forceinline__ void add_to_residual(float (&v)[8], __nv_bfloat16* residual) {
  float r[8];
  to_float8(load_bf16x8(residual), r);
#pragma unroll
  for (int j = 0; j < 8; ++j) r[j] += v[j];
  const Bf16x8 stored = from_float8(r);
  store_bf16x8(residual, stored);
  to_float8(stored, v);
}

__device__ __forceinline__ void add_squares(const float (&v)[8], float& sum_sq) {
#pragma unroll
  for (int j = 0; j < 8; ++j) sum_sq += v[j] * v[j];
}

// out_row = vals / rms * weight, from the row's sum of squares gathered by every thread (block_sum).
template <int kVecs>
__device__ __forceinline__ void normalise_and_store(float (&vals)[kVecs][8], float sum_sq,
                                                    const __nv_bfloat16* __restrict__ weight, float eps, int hidden,
                                                    __nv_bfloat16* out_row, float* scratch) {
  const int nvec = hidden / 8;
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v >= nvec) continue;
    float w[8];
    to_float8(load_bf16x8(weight + v * 8), w);
#pragma unroll
    for (int j = 0; j < 8; ++j) vals[i][j] = vals[i][j] * inv_rms * w[j];
    store_bf16x8(out_row + v * 8, from_float8(vals[i]));
  }
}

// The whole row: load(v, vals) gives the thread's vector v in fp32; with kAddResidual, residual_row += vals
// first (vals becomes the stored bf16 sum); then out_row = vals / rms * weight.
template <int kVecs, bool kAddResidual, class Load>
__device__ __forceinline__ void rms_norm_row(Load load, __nv_bfloat16* residual_row,
                                             const __nv_bfloat16* __restrict__ weight, float eps, int hidden,
                                             __nv_bfloat16* out_row, float* scratch) {
  const int nvec = hidden / 8;
  float vals[kVecs][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v >= nvec) continue;
    load(v, vals[i]);
    if constexpr (kAddResidual) add_to_residual(vals[i], residual_row + v * 8);
    add_squares(vals[i], sum_sq);
  }
  normalise_and_store<kVecs>(vals, sum_sq, weight, eps, hidden, out_row, scratch);
}

}  // namespace nanovllm::cuda
