#pragma once
// What the two GEMV kernels (gemv.cu's rounds, gemv_streamed.cu's ring) share: the activation load after the wait for
// the previous kernel, the mma they multiply with, and a folded RMSNorm's sides and fixed-point sums (gemv.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv.h"

namespace nanovllm::cuda::gemv_detail {

// volatile + "memory": x is written by the previous kernel, so these loads must stay after
// wait_for_previous_grid() (the W loads may move freely). A plain (coherent) ld.global rather than .nc:
// under a programmatic dependent launch x is written while this grid is already resident.
__device__ __forceinline__ uint4 load_activation_or_zero(const __nv_bfloat16* p, bool pred) {
  uint4 v;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\t"
      "mov.b32 %3, 0;\n\t@p ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred))
      : "memory");
  return v;
}

// c[4] += A (16 × 16 bf16, row-major fragments a0..a3) · B (16 × 8 bf16, column fragments b0, b1).
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Which side of a folded RMSNorm a call is (GemvArgs): neither, the call after it, or the call before it.
enum class NormFold { kNone, kScaleByInputRms, kAddResidual };

// GemvNormSum's range and flag.
constexpr float kNormSumFractionUnits = 0x1p40f;  // fraction units a whole unit
constexpr float kNormSumMaxPiece = 0x1p52f;
constexpr unsigned long long kNormSumNotFinite = 1ull << 63;

// Adds one 8-row piece (>= 0) of a row's sum of squares. Both words are exact functions of the piece (its whole
// part, and its fraction scaled by 2^40 and rounded), so the integer total is the same in any order.
__device__ __forceinline__ void add_norm_sum_piece(GemvNormSum* sum, float square) {
  if (!(square < kNormSumMaxPiece)) {  // inf, NaN or out of range
    atomicOr(&sum->whole, kNormSumNotFinite);
    return;
  }
  const float whole = floorf(square);
  const auto whole_units = static_cast<unsigned long long>(whole);
  const auto fraction_units = static_cast<unsigned long long>(rintf((square - whole) * kNormSumFractionUnits));
  if (whole_units != 0) atomicAdd(&sum->whole, whole_units);
  if (fraction_units != 0) atomicAdd(&sum->fraction, fraction_units);
}

__device__ __forceinline__ float norm_sum_value(unsigned long long whole, unsigned long long fraction) {
  if ((whole & kNormSumNotFinite) != 0) return __int_as_float(0x7fffffff);  // NaN
  return static_cast<float>(static_cast<double>(whole) +
                            static_cast<double>(fraction) / static_cast<double>(kNormSumFractionUnits));
}

__device__ __forceinline__ float round_to_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ __forceinline__ void store_output(float* out, int64_t i, float v) { out[i] = v; }
__device__ __forceinline__ void store_output(__nv_bfloat16* out, int64_t i, float v) {
  out[i] = __float2bfloat16_rn(v);
}

// The residual call's epilogue for output (token, row) of a [tokens, n] call (GemvArgs' folded norm), as the
// separate add_rms_norm computes it: the output rounded as stored, added to the residual in fp32, the sum rounded.
// Where `stored` it reads the output's residual (residual_in()) and norm weight (weight()) and stores the new residual
// and residual x norm weight; it adds the output's square to the token's sum. Every lane of the warp calls it
// (shuffles): a C fragment's 8 rows of one token are the lanes that differ in bits 0, 2 and 3, and the lane with those
// bits clear adds their piece.
template <typename OutT, typename ResidualIn, typename Weight>
__device__ __forceinline__ void finish_residual_output(bool stored, float sum, const ResidualIn& residual_in,
                                                       const Weight& weight, int token, int tokens, int row, int n,
                                                       int lane, const NormFoldParams& norm, OutT* out) {
  float square = 0.0f;
  if (stored) {
    const int64_t at = static_cast<int64_t>(token) * n + row;
    const float h = round_to_bf16(residual_in() + round_to_bf16(sum));
    norm.residual[at] = __float2bfloat16_rn(h);
    store_output(out, at, h * weight());
    square = h * h;
  }
  square += __shfl_xor_sync(0xffffffffu, square, 1);
  square += __shfl_xor_sync(0xffffffffu, square, 4);
  square += __shfl_xor_sync(0xffffffffu, square, 8);
  if ((lane & 13) == 0 && token < tokens) add_norm_sum_piece(norm.sum_squares + token, square);
}

inline NormFold norm_fold_of(const NormFoldParams& norm) {
  return norm.residual != nullptr            ? NormFold::kAddResidual
         : norm.input_sum_squares != nullptr ? NormFold::kScaleByInputRms
                                             : NormFold::kNone;
}
inline NormFold norm_fold_of(const GemvArgs& a) { return norm_fold_of(a.norm); }

}  // namespace nanovllm::cuda::gemv_detail
