// Block-scaled FP8 weight to bf16 (code * block_scale[n / 128, k / 128], rounded once): the operand cuBLASLt
// multiplies for FP8 linears of more rows than the GEMV takes. Eight elements a thread (8 bytes in, 16 out).
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_vec.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/programmatic_launch.cuh"
#include "common/fp8.h"

namespace nanovllm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlock = static_cast<int>(kFp8BlockSize);  // rows and columns per scale

__global__ void __launch_bounds__(kThreads)
    dequantize_fp8_weight_kernel(const uint8_t* __restrict__ codes, const float* __restrict__ block_scale,
                                 __nv_bfloat16* __restrict__ out, int n, int k) {
  start_after_previous_grid();
  const int64_t chunks_per_row = k / 8;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (chunk >= static_cast<int64_t>(n) * chunks_per_row) return;
  const int row = static_cast<int>(chunk / chunks_per_row);
  const int col = static_cast<int>(chunk % chunks_per_row) * 8;  // 8 | 128: one scale for the chunk
  const float scale = block_scale[static_cast<int64_t>(row / kBlock) * ((k + kBlock - 1) / kBlock) + col / kBlock];
  const int64_t at = static_cast<int64_t>(row) * k + col;
  float f[8];
  fp8x8_to_float(*reinterpret_cast<const uint2*>(codes + at), f);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] *= scale;
  store_bf16x8(out + at, from_float8(f));
}

}  // namespace

void launch_dequantize_fp8_weight(const uint8_t* codes, const float* block_scale, __nv_bfloat16* out, int n, int k,
                                  cudaStream_t stream) {
  if (n == 0 || k == 0) return;
  if (k % 8 != 0) throw EngineError("dequantize_fp8_weight: K " + std::to_string(k) + " is not a multiple of 8");
  const int64_t chunks = static_cast<int64_t>(n) * (k / 8);
  launch_programmatic("dequantize_fp8_weight_kernel", dequantize_fp8_weight_kernel,
                      dim3(static_cast<unsigned>((chunks + kThreads - 1) / kThreads)), dim3(kThreads), 0, stream, codes,
                      block_scale, out, n, k);
}

}  // namespace nanovllm::cuda
