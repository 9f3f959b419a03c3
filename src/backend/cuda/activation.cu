// SiLU(gate) * up: one thread per eight outputs, 16-byte loads of gate and up, one 16-byte store.
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/programmatic_launch.cuh"
#include "backend/cuda/silu.cuh"

namespace nanovllm::cuda {
namespace {

__global__ void silu_and_mul_kernel(const __nv_bfloat16* __restrict__ gate_up, __nv_bfloat16* __restrict__ out,
                                    int64_t total_vecs, int inter) {
  start_after_previous_grid();
  const int vecs_per_row = inter / 8;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total_vecs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / vecs_per_row;
    const int c = static_cast<int>(i - t * vecs_per_row) * 8;
    const __nv_bfloat16* row = gate_up + t * 2 * inter;
    float g[8], u[8], o[8];
    to_float8(load_bf16x8(row + c), g);
    to_float8(load_bf16x8(row + inter + c), u);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = silu_mul(g[j], u[j]);
    store_bf16x8(out + t * inter + c, from_float8(o));
  }
}

}  // namespace

void launch_silu_and_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int num_tokens, int inter,
                         cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_tokens) * (inter / 8);
  if (total == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 132 * 16);
  launch_programmatic("silu_and_mul_kernel", silu_and_mul_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
                      0, stream, gate_up, out, total, inter);
}

}  // namespace nanovllm::cuda
