// Small elementwise helpers: the bias add of an fp32 GEMM output and an fp32 -> bf16 conversion.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace nanovllm::cuda {
namespace {

__global__ void add_bias_f32_kernel(float* out, const __nv_bfloat16* __restrict__ bias, int64_t total, int cols) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] += __bfloat162float(bias[i % cols]);
  }
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16_rn(src[i]);
  }
}

int grid_for(int64_t n, int threads) { return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096)); }

}  // namespace

void launch_add_bias_f32(float* out, const __nv_bfloat16* bias, int rows, int cols, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(rows) * cols;
  if (total == 0) return;
  add_bias_f32_kernel<<<grid_for(total, 256), 256, 0, stream>>>(out, bias, total, cols);
  NANOVLLM_CHECK_LAUNCH("add_bias_f32_kernel");
}

void launch_f32_to_bf16(const float* src, __nv_bfloat16* dst, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return;
  f32_to_bf16_kernel<<<grid_for(numel, 256), 256, 0, stream>>>(src, dst, numel);
  NANOVLLM_CHECK_LAUNCH("f32_to_bf16_kernel");
}

}  // namespace nanovllm::cuda
