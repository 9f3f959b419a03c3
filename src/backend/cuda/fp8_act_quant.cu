// Dynamic FP8 quantisation of bf16 activations for the block-scaled FP8 GEMM (common/fp8_activation.h has the
// rule and the CPU reference). Half a warp takes one (token, 128-wide K group): each lane loads 8 values (16
// bytes), the group's amax is a max over 16 lanes, and each lane writes its 8 codes (8 bytes). The scale goes
// to scales[group * m + token], the order cuBLASLt's VEC128_32F mode reads for an operand whose K is contiguous
// (fp8_block_gemm.h): the tokens of one K group are adjacent.
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_vec.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/programmatic_launch.cuh"
#include "common/fp8_activation.h"

namespace nanovllm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kLanesPerGroup = 16;
constexpr int kGroup = static_cast<int>(kFp8BlockSize);
static_assert(kLanesPerGroup * 8 == kGroup, "a half warp covers one group, 8 values a lane");

__global__ void __launch_bounds__(kThreads)
    quantize_fp8_activations_kernel(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ codes,
                                    float* __restrict__ scales, int m, int k, int groups_per_row) {
  start_after_previous_grid();
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t group = thread / kLanesPerGroup;
  const int lane = static_cast<int>(thread % kLanesPerGroup);
  const bool in_grid = group < static_cast<int64_t>(m) * groups_per_row;
  const int row = in_grid ? static_cast<int>(group / groups_per_row) : 0;
  const int g = in_grid ? static_cast<int>(group % groups_per_row) : 0;
  const int col = g * kGroup + lane * 8;
  // K is a multiple of 16, so a lane's 8 values lie wholly inside or wholly past the row's end.
  const bool active = in_grid && col < k;
  const int64_t at = static_cast<int64_t>(row) * k + col;
  float f[8] = {};
  if (active) to_float8(load_bf16x8(x + at), f);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
    // Every lane of the warp takes part (lanes past the grid hold zeros); offsets below 16 stay in the half warp.
#pragma unroll
  for (int offset = kLanesPerGroup / 2; offset > 0; offset >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  if (!active) return;
  const float scale = fp8_scale_for_amax(amax);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = __fdiv_rn(f[i], scale);  // division, as the reference: bit-exact codes
  *reinterpret_cast<uint2*>(codes + at) = fp8x8_from_float(f);
  if (lane == 0) scales[static_cast<int64_t>(g) * m + row] = scale;
}

}  // namespace

void launch_quantize_fp8_activations(const __nv_bfloat16* x, uint8_t* codes, float* scales, int m, int k,
                                     cudaStream_t stream) {
  if (m == 0 || k == 0) return;
  if (k % 16 != 0) throw EngineError("quantize_fp8_activations: K " + std::to_string(k) + " is not a multiple of 16");
  const int groups_per_row = static_cast<int>(fp8_blocks(k));
  const int64_t threads = static_cast<int64_t>(m) * groups_per_row * kLanesPerGroup;
  launch_programmatic("quantize_fp8_activations_kernel", quantize_fp8_activations_kernel,
                      dim3(static_cast<unsigned>((threads + kThreads - 1) / kThreads)), dim3(kThreads), 0, stream, x,
                      codes, scales, m, k, groups_per_row);
}

}  // namespace nanovllm::cuda
