// RMSNorm and residual-add + RMSNorm, one block per row (the row's steps are in rms_norm_row.cuh), so the row
// is read once and written once (the fused add reads x and residual, writes residual and out). The fused add
// rounds residual to bf16 first and normalises that stored value.
// out may alias x (each thread reads its vectors before it writes them), so x and out are not __restrict__.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/programmatic_launch.cuh"
#include "backend/cuda/rms_norm_row.cuh"

namespace nanovllm::cuda {
namespace {

template <int kVecs, bool kAddResidual>
__global__ void rms_norm_kernel(const __nv_bfloat16* x, __nv_bfloat16* residual,
                                const __nv_bfloat16* __restrict__ weight, float eps, __nv_bfloat16* out, int hidden) {
  __shared__ float scratch[32];
  start_after_previous_grid();
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  rms_norm_row<kVecs, kAddResidual>([&](int v, float(&f)[8]) { to_float8(load_bf16x8(x + base + v * 8), f); },
                                    kAddResidual ? residual + base : nullptr, weight, eps, hidden, out + base, scratch);
}

template <bool kAddResidual>
void launch(const __nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight, float eps, __nv_bfloat16* out,
            int rows, int hidden, cudaStream_t stream) {
  if (rows == 0) return;
  const int threads = rms_norm_threads(hidden);
  const auto kernel =
      rms_norm_vectors_per_thread(hidden) == 1 ? rms_norm_kernel<1, kAddResidual> : rms_norm_kernel<2, kAddResidual>;
  launch_programmatic(kAddResidual ? "add_rms_norm_kernel" : "rms_norm_kernel", kernel,
                      dim3(static_cast<unsigned>(rows)), dim3(static_cast<unsigned>(threads)), 0, stream, x, residual,
                      weight, eps, out, hidden);
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
