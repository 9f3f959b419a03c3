// RMSNorm and residual-add + RMSNorm. One block per row; each thread keeps its 16-byte vectors of the row in
// registers, so the row is read once and written once (the fused add reads x and residual, writes residual
// and out). Math in fp32; the fused add rounds residual to bf16 first and normalises that stored value.
// out may alias x (each thread reads its vectors before it writes them), so x and out are not __restrict__.
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace nanovllm::cuda {
namespace {

template <int kVecs, bool kAddResidual>
__global__ void rms_norm_kernel(const __nv_bfloat16* x, __nv_bfloat16* residual,
                                const __nv_bfloat16* __restrict__ weight, float eps, __nv_bfloat16* out,
                                int hidden) {
  __shared__ float scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  const int nvec = hidden / 8;
  float vals[kVecs][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < nvec) {
      to_float8(load_bf16x8(x + base + v * 8), vals[i]);
      if constexpr (kAddResidual) {
        float r[8];
        to_float8(load_bf16x8(residual + base + v * 8), r);
#pragma unroll
        for (int j = 0; j < 8; ++j) r[j] += vals[i][j];
        const Bf16x8 stored = from_float8(r);
        store_bf16x8(residual + base + v * 8, stored);
        to_float8(stored, vals[i]);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) sum_sq += vals[i][j] * vals[i][j];
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < nvec) {
      float w[8];
      to_float8(load_bf16x8(weight + v * 8), w);
#pragma unroll
      for (int j = 0; j < 8; ++j) vals[i][j] = vals[i][j] * inv_rms * w[j];
      store_bf16x8(out + base + v * 8, from_float8(vals[i]));
    }
  }
}

template <bool kAddResidual>
void launch(const __nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight, float eps,
            __nv_bfloat16* out, int rows, int hidden, cudaStream_t stream) {
  if (rows == 0) return;
  const int nvec = hidden / 8;
  const int threads = nvec >= 1024 ? 1024 : ((nvec + 31) / 32) * 32;
  if (nvec <= threads) {
    rms_norm_kernel<1, kAddResidual><<<rows, threads, 0, stream>>>(x, residual, weight, eps, out, hidden);
  } else {
    rms_norm_kernel<2, kAddResidual><<<rows, threads, 0, stream>>>(x, residual, weight, eps, out, hidden);
  }
  NANOVLLM_CHECK_LAUNCH(kAddResidual ? "add_rms_norm_kernel" : "rms_norm_kernel");
}

}  // namespace

void launch_rms_norm(const __nv_bfloat16* x, const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, int rows,
                     int hidden, cudaStream_t stream) {
  launch<false>(x, nullptr, weight, eps, out, rows, hidden, stream);
}

void launch_add_rms_norm(const __nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight, float eps,
                         __nv_bfloat16* out, int rows, int hidden, cudaStream_t stream) {
  launch<true>(x, residual, weight, eps, out, rows, hidden, stream);
}

}  // namespace nanovllm::cuda
