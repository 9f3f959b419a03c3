// Weight-streaming skinny linear (docs/kernels/gemv.md). The tensor core does the dot products: one
// mma.m16n8k16 takes A = x (M = 16 token slots), B = W^T (N = 8 weight rows), K = 16. Because a k-sum may be
// taken in any order, the 32 k of a step are permuted so that lane (g = lane / 4, c = lane % 4) feeds both
// of its B fragments from ONE 16-byte load W[row g][k0 + 8c, +8) and its A fragments from the matching
// 16-byte loads x[token g][k0 + 8c, +8) and x[token g + 8][...]. No shuffles, no shared-memory staging.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/attention_mma.cuh"  // cp.async
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_vec.cuh"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/gemv_streamed.h"
#include "backend/cuda/programmatic_launch.cuh"
#include "backend/cuda/silu.cuh"
#include "common/fp8.h"

namespace nanovllm::cuda {
namespace {

using gemv_detail::add_norm_sum_piece;
using gemv_detail::finish_residual_output;
using gemv_detail::load_activation_or_zero;
using gemv_detail::mma_bf16_m16n8k16;
using gemv_detail::norm_fold_of;
using gemv_detail::norm_sum_value;
using gemv_detail::NormFold;
using gemv_detail::round_to_bf16;
using gemv_detail::store_output;

constexpr int kRowsPerGroup = 8;        // the mma's N: one weight row per lane quad
constexpr int kStepK = 32;              // k per step: 4 lanes × 8 bf16 (FP8: step_k)
constexpr int kMaxWarps = 16;           // warps of a CTA split K
constexpr int kMaxRowGroups = 4;        // row_groups_for's largest
constexpr int kWeightLoadsPerLane = 8;  // 16-byte W loads a lane issues before its first mma of a round
constexpr int kFp8Block = static_cast<int>(kFp8BlockSize);  // FP8 weights: rows and columns per scale
constexpr int kSliceTokens = 16;  // tokens a token slice holds: it runs the kernel for 9-16 tokens (layout_for)
// FP8 weights below this many elements take their codes to bf16 on the integer pipes (kIntegerCodes): faster for
// every Qwen3-0.6B projection and Qwen3-8B's qkv and o_proj, slower for 8B's gate_up and down (docs/kernels/gemv.md,
// "FP8 weights"; results.md R74).
constexpr int64_t kIntegerCodesMaxWeight = int64_t{32} << 20;

// k per step: 4 lanes x one 16-byte W load each (8 bf16, or 16 FP8 codes).
constexpr int step_k(bool fp8) { return fp8 ? 2 * kStepK : kStepK; }
// Consecutive k steps a warp takes per round: kWeightLoadsPerLane 16-byte W loads in flight. Above 16 tokens a
// round's x loads are twice as many, and two steps a round is what the registers of a 16-warp CTA hold with 2 row
// groups (4 W loads in flight); 4 groups keep 8, which measured faster than one step a round (results.md R116).
constexpr int unroll_for(int row_groups, int token_groups) {
  return token_groups > 2 ? std::max(2, kWeightLoadsPerLane / 2 / row_groups)
                          : std::max(2, kWeightLoadsPerLane / row_groups);
}

// Predicated 16-byte loads (zeros when !pred) in one asm, so the compiler can neither speculate the load
// nor turn the predicate into a branch. W is streamed (read once, never written: the non-coherent path and
// no L1 allocation).
__device__ __forceinline__ uint4 load_weight_or_zero(const __nv_bfloat16* p, bool pred) {
  uint4 v;
  asm("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\t"
      "mov.b32 %3, 0;\n\t@p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

// A block scale of FP8 weights, predicated (0 when !pred), in one volatile asm so that it is issued where the source
// puts it: with the round's weights, before the wait for the previous grid. Left to the compiler, the folded-norm
// kernels issued it after the fold's copies and waited on it before issuing the x loads, a round trip in series
// (ncu, Qwen3-8B's qkv at T = 1: 18.6 us folded against 16.4 plain, 28% of the stall samples on the scale's use).
__device__ __forceinline__ float load_scale_or_zero(const float* p, bool pred) {
  float v;
  asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %2, 0;\n\tmov.b32 %0, 0;\n\t@p ld.global.nc.f32 %0, [%1];\n\t}"
               : "=f"(v)
               : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

// 16 bytes from global to shared memory (cp.async) where `copy`, else nothing: the predicate inside the asm.
// (attention_detail::cp_async_16 with 0 source bytes would zero-fill the destination, which another lane copies.)
__device__ __forceinline__ void copy_16_async_if(void* dst_shared, const void* src, bool copy) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %2, 0;\n\t@p cp.async.cg.shared.global [%0], [%1], 16;\n\t}\n" ::"r"(
          attention_detail::smem_address(dst_shared)),
      "l"(src), "r"(static_cast<int>(copy))
      : "memory");
}

// Registers a thread: what one 16-warp CTA an SM leaves (launch bounds), except that a folded norm's kernel for up
// to 8 tokens keeps the 80 of the plain one. Left to itself the compiler took 88 there, which fits one CTA fewer
// an SM (registers go to a warp 256 at a time): Qwen3-0.6B's gate_up at T = 1 (768 CTAs of 4 warps) then ran in
// 1.16 waves instead of 0.97 and took 7.1 us instead of 5.9 (ncu, H100).
constexpr int max_registers(int token_groups, bool fp8, NormFold fold) {
  return fold != NormFold::kNone && !fp8 && token_groups == 1 ? 80 : 65536 / (kMaxWarps * 32);
}

// kTokenGroups: groups of 8 tokens, 1 for tokens <= 8 (A rows 8..15 are zero), 2 for tokens <= 16, 4 for tokens <=
// 32 (bf16 weights only): two mma tiles of 16 tokens, each weight fragment multiplied by both.
// kRowGroups: groups of 8 weight rows per warp, all multiplied by the same x registers.
// A CTA owns rows [blockIdx.x * 8 kRowGroups, +8 kRowGroups); its warps take interleaved runs of kUnroll
// consecutive k steps, then reduce their partial tiles through shared memory.
// kFp8: the weight is FP8 codes with 128 x 128 block scales. A lane's 16-byte load then holds 16 codes, so a step
// is 64 wide (four mmas, x loaded 32 bytes a token at a time) and as many bytes stay in flight as with bf16. A
// CTA's at most 32 rows lie in one row block and a step in one column block, so each step's product is taken
// unscaled (the codes are exact in bf16) and added to the accumulators times that block's scale.
// kIntegerCodes (FP8 only): the codes become bf16 on the integer pipes, scaled by 2^-120 (fp8x8_to_scaled_bf16x8),
// instead of through the conversion instructions (kIntegerCodesMaxWeight says where).
// kSwiglu: the weight is [gate; up] (2n rows) and out[t, i] = SiLU(gate row i . x) x (up row i . x), each product
// rounded to bf16 first as the separate linear and silu_and_mul store it, so the bits are theirs and the gate_up
// output never goes to memory. A CTA's first 4 kRowGroups weight rows are gate rows [out0, out0 + 4 kRowGroups),
// the rest the up rows of the same outputs: every row keeps its place in the k-split and its sums, and n % (4
// kRowGroups) == 0 keeps each half inside one 128-row FP8 scale block.
// kNorm: kScaleByInputRms copies the input norm's sums of squares (two words a token) to shared memory right after
// the wait (they land while the weights stream; thread t copies token t's and reads them itself, so no barrier is
// added) and multiplies each product by its token's 1 / rms in the epilogue; kAddResidual copies the CTA's residual
// rows and norm weights to shared memory right after the wait, adds each output to the residual, writes residual *
// norm_weight, and adds the squares of every 8-row group (a C fragment's rows: lanes that differ in bits 0, 2 and 3,
// summed by shuffles) to the token's sum (GemvNormSum); its CTA 0 zeroes the stale sums. Every CTA pays what a fold
// adds, and a grid of many waves pays it once a wave, so the epilogue starts no load: what it reads was copied while
// the weights streamed.
// kTokenSlices (bf16 weights, 9-16 tokens a slice): CTA row y of the grid takes the call's tokens [16 y, 16 y + 16)
// as a call of its own would, over the same weight rows as every other slice (layout_for says where). A template
// parameter so that the kernels that never slice keep their registers.
template <int kTokenGroups, int kRowGroups, typename OutT, bool kFp8 = false, bool kIntegerCodes = false,
          bool kSwiglu = false, NormFold kNorm = NormFold::kNone, bool kTokenSlices = false>
__global__ void __launch_bounds__(kMaxWarps * 32, 1) __maxnreg__(max_registers(kTokenGroups, kFp8, kNorm))
    gemv_kernel(const __nv_bfloat16* __restrict__ x, const void* __restrict__ weight_any,
                const float* __restrict__ block_scale, const __nv_bfloat16* __restrict__ bias, OutT* __restrict__ out,
                int tokens, int n, int k, NormFoldParams norm) {
  constexpr int kStep = step_k(kFp8);
  constexpr int kLaneK = kStep / 4;    // k values of a lane in one step (one 16-byte W load)
  constexpr int kXLoads = kLaneK / 8;  // 16-byte x loads per token group and step
  static_assert(kFp8Block % (kRowsPerGroup * 4) == 0 && kFp8Block % kStep == 0, "blocks hold whole CTAs/steps");
  constexpr int kUnroll = unroll_for(kRowGroups, kTokenGroups);
  constexpr int kTiles = (kTokenGroups + 1) / 2;    // mma tiles of 16 tokens
  constexpr int kTileFloats = kRowGroups * 32 * 4;  // one warp's C fragments of one tile
  static_assert(kTokenGroups == 1 || kTokenGroups == 2 || (kTokenGroups == 4 && !kFp8), "1-16 tokens, bf16 to 32");
  constexpr int kWeightBytes = kFp8 ? 1 : 2;
  // FP8 block scales loaded with the round's weights (load_scale_or_zero) where a fold's copies follow the wait;
  // the plain kernel measured faster with the compiler's placement (bench_gemv, H100: Qwen3-0.6B's qkv at T = 1
  // 3.53 us as placed by the compiler, 4.04 loaded with the weights).
  constexpr bool kEarlyScales = kFp8 && kNorm != NormFold::kNone;
  __shared__ float4 partial[kMaxWarps][kRowGroups][32];  // one tile's at a time
  // kScaleByInputRms: the first 16 bytes of each word's line, whole then fraction, a token after another.
  __shared__ ulonglong2 input_sums[kNorm == NormFold::kScaleByInputRms ? kTokenGroups * 8 * 2 : 1];
  __shared__ float inv_rms[kTokenGroups * 8];
  constexpr int kCtaRows = kRowsPerGroup * kRowGroups;
  __shared__ alignas(16) __nv_bfloat16 residual_rows[kNorm == NormFold::kAddResidual ? kTokenGroups * 8 : 1][kCtaRows];
  __shared__ alignas(16) __nv_bfloat16 norm_weights[kCtaRows];
  static_assert(kNorm == NormFold::kNone || std::is_same_v<OutT, __nv_bfloat16>, "a folded norm writes bf16");
  static_assert(kNorm != NormFold::kAddResidual || !kSwiglu, "the residual's call is a plain one");

  static_assert(!kTokenSlices || (kTokenGroups * 8 == kSliceTokens && !kFp8), "slices of 9-16 tokens, bf16 weights");
  allow_next_grid();
  if constexpr (kTokenSlices) {
    const int first = static_cast<int>(blockIdx.y) * kSliceTokens;
    tokens = min(tokens - first, kSliceTokens);
    x += static_cast<int64_t>(first) * k;
    out += static_cast<int64_t>(first) * n;
    if (norm.residual != nullptr) norm.residual += static_cast<int64_t>(first) * n;
    if (norm.sum_squares != nullptr) norm.sum_squares += first;
    if (norm.input_sum_squares != nullptr) norm.input_sum_squares += first;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  static_assert(!kSwiglu || std::is_same_v<OutT, __nv_bfloat16>, "the fused SiLU writes bf16");
  constexpr int kHalfRows = kRowsPerGroup * kRowGroups / 2;  // kSwiglu: outputs (gate rows, up rows) of a CTA
  const int row0 = blockIdx.x * (kSwiglu ? kHalfRows : kRowsPerGroup * kRowGroups);
  const int steps = (k + kStep - 1) / kStep;

  // Rows past n read the last real row: their outputs are never stored, and the load stays in bounds.
  const char* w_row[kRowGroups];
#pragma unroll
  for (int r = 0; r < kRowGroups; ++r) {
    const int q = r * 8 + g;
    const int row = !kSwiglu ? min(row0 + q, n - 1) : q < kHalfRows ? row0 + q : n + row0 + q - kHalfRows;
    w_row[r] = static_cast<const char*>(weight_any) + static_cast<int64_t>(row) * k * kWeightBytes;
  }
  const int64_t scale_stride = (k + kFp8Block - 1) / kFp8Block;
  const float* scale_row = kFp8 ? block_scale + static_cast<int64_t>(row0 / kFp8Block) * scale_stride : nullptr;
  const float* up_scale_row =
      kFp8 && kSwiglu ? block_scale + static_cast<int64_t>((n + row0) / kFp8Block) * scale_stride : nullptr;
  const __nv_bfloat16* x_row[kTokenGroups];
  bool x_live[kTokenGroups];
#pragma unroll
  for (int h = 0; h < kTokenGroups; ++h) {
    const int token = g + 8 * h;
    x_live[h] = token < tokens;
    x_row[h] = x + static_cast<int64_t>(x_live[h] ? token : 0) * k;
  }

  float acc[kRowGroups][kTiles][4] = {};

  for (int round = 0; round < steps; round += warps * kUnroll) {
    uint4 wv[kUnroll][kRowGroups], xv[kUnroll][kTokenGroups][kXLoads];
    float scales[kUnroll], up_scales[kUnroll];  // FP8: each step's block scale (kSwiglu: the up rows' beside it)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int step = round + warp * kUnroll + u;
      const int kk = step * kStep + kLaneK * c;
      const bool live = kk < k;  // k % kLaneK == 0: a lane's chunk is all in or all out
#pragma unroll
      for (int r = 0; r < kRowGroups; ++r)
        wv[u][r] = load_weight_or_zero(reinterpret_cast<const __nv_bfloat16*>(w_row[r] + kk * kWeightBytes), live);
      if constexpr (kEarlyScales) {  // 0 past k: its loads were zeros anyway
        const bool scaled = step * kStep < k;
        const int block = scaled ? step * kStep / kFp8Block : 0;
        scales[u] = load_scale_or_zero(scale_row + block, scaled);
        up_scales[u] = kSwiglu ? load_scale_or_zero(up_scale_row + block, scaled) : 0.0f;
      }
    }
    // Under a programmatic launch the weights above stream in while the previous kernel finishes; everything
    // below may read its output.
    if (round == 0) wait_for_previous_grid();
    // The fold's operands, before the x loads (where fewer registers are live): copied by the first warp's lanes,
    // predicated rather than branched around (FP8 codes measured faster so: Qwen3-0.6B's o_proj at T = 1 0.16 us).
    if (round == 0) {
      if constexpr (kNorm == NormFold::kScaleByInputRms) {  // thread t copies token t's words
        const GemvNormSum& sum = norm.input_sum_squares[min(static_cast<int>(threadIdx.x), tokens - 1)];
        const bool copy = threadIdx.x < static_cast<unsigned>(tokens);
        copy_16_async_if(&input_sums[2 * (threadIdx.x % (kTokenGroups * 8))], &sum.whole, copy);
        copy_16_async_if(&input_sums[2 * (threadIdx.x % (kTokenGroups * 8)) + 1], &sum.fraction, copy);
        attention_detail::cp_async_commit();
      }
      if constexpr (kNorm == NormFold::kAddResidual) {
        // 8 rows a chunk (n % 8 == 0), kRowGroups chunks a token and as many of norm weights after them; chunks
        // past n are left alone (their outputs are not stored).
#pragma unroll
        for (int base = 0; base < (kTokenGroups * 8 + 1) * kRowGroups; base += 32) {
          const int i = base + lane, t = min(i / kRowGroups, tokens), r = i % kRowGroups;
          const int row = min(row0 + r * kRowsPerGroup, n - kRowsPerGroup);
          const bool weights = t == tokens;
          copy_16_async_if(weights ? &norm_weights[r * kRowsPerGroup] : &residual_rows[t][r * kRowsPerGroup],
                           weights ? norm.norm_weight + row : norm.residual + static_cast<int64_t>(t) * n + row,
                           warp == 0 && i < (tokens + 1) * kRowGroups && row0 + r * kRowsPerGroup < n);
        }
        attention_detail::cp_async_commit();
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int kk = (round + warp * kUnroll + u) * kStep + kLaneK * c;
      const bool live = kk < k;
#pragma unroll
      for (int h = 0; h < kTokenGroups; ++h)
#pragma unroll
        for (int j = 0; j < kXLoads; ++j)
          xv[u][h][j] = load_activation_or_zero(x_row[h] + kk + 8 * j, live && x_live[h]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int step = round + warp * kUnroll + u;
      const bool scaled = kFp8 && step * kStep < k;
      const float factor = kIntegerCodes ? kScaledBf16Factor : 1.0f;
      const int block = step * kStep / kFp8Block;  // the step's block scale (0 past k: its loads were zeros)
      const float scale = kEarlyScales ? scales[u] * factor : scaled ? __ldg(scale_row + block) * factor : 0.0f;
      const float up_scale = !kSwiglu       ? 0.0f
                             : kEarlyScales ? up_scales[u] * factor
                             : scaled       ? __ldg(up_scale_row + block) * factor
                                            : 0.0f;
#pragma unroll
      for (int r = 0; r < kRowGroups; ++r) {
        const auto multiply = [&](float(&into)[kTiles][4]) {
#pragma unroll
          for (int j = 0; j < kXLoads; ++j) {
            const uint2 codes = j == 0 ? make_uint2(wv[u][r].x, wv[u][r].y) : make_uint2(wv[u][r].z, wv[u][r].w);
            const uint4 w = !kFp8 ? wv[u][r] : kIntegerCodes ? fp8x8_to_scaled_bf16x8(codes) : fp8x8_to_bf16x8(codes);
#pragma unroll
            for (int tile = 0; tile < kTiles; ++tile) {
              // x pairs 0..3 of the lane's j-th 8 values and the weight pairs of the same 8 k: pairs 0, 1 are
              // logical k (2c, 2c+8) of one mma, pairs 2, 3 of the next.
              const uint4 lo = xv[u][2 * tile][j];
              const uint4 hi = 2 * tile + 1 < kTokenGroups ? xv[u][2 * tile + 1][j] : make_uint4(0, 0, 0, 0);
              mma_bf16_m16n8k16(into[tile], lo.x, hi.x, lo.y, hi.y, w.x, w.y);
              mma_bf16_m16n8k16(into[tile], lo.z, hi.z, lo.w, hi.w, w.z, w.w);
            }
          }
        };
        if constexpr (kFp8) {  // one tile (kTokenGroups <= 2)
          float part[kTiles][4] = {};
          multiply(part);
          // This lane's C fragment holds rows 8 r + 2 c and + 1 of the CTA: gate rows, or up rows.
          const float s = kSwiglu && r * 8 + 2 * c >= kHalfRows ? up_scale : scale;
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[r][0][i] = fmaf(s, part[0][i], acc[r][0][i]);
        } else {
          multiply(acc[r]);
        }
      }
    }
  }

  if constexpr (kNorm == NormFold::kAddResidual) {
    if (blockIdx.x == 0 && (!kTokenSlices || blockIdx.y == 0))
      for (int i = threadIdx.x; i < 2 * norm.stale_sum_count; i += blockDim.x)
        (i % 2 == 0 ? norm.stale_sums[i / 2].whole : norm.stale_sums[i / 2].fraction) = 0;
  }
  if constexpr (kNorm != NormFold::kNone) attention_detail::cp_async_wait<0>();
  if constexpr (kNorm == NormFold::kScaleByInputRms) {
    // Thread t reads the words it copied itself; the barrier below publishes inv_rms.
    if (threadIdx.x < static_cast<unsigned>(tokens))
      inv_rms[threadIdx.x] = rsqrtf(norm_sum_value(input_sums[2 * threadIdx.x].x, input_sums[2 * threadIdx.x + 1].x) /
                                        static_cast<float>(k) +
                                    norm.eps);
  }
  const auto input_scale = [&](int token) { return kNorm == NormFold::kScaleByInputRms ? inv_rms[token] : 1.0f; };

  // One tile of 16 tokens at a time through the shared partial tiles (two tiles' would not fit beside a 16-warp
  // CTA's other shared memory).
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
    if (tile > 0) __syncthreads();  // every thread has summed the previous tile
#pragma unroll
    for (int r = 0; r < kRowGroups; ++r)
      partial[warp][r][lane] = make_float4(acc[r][tile][0], acc[r][tile][1], acc[r][tile][2], acc[r][tile][3]);
    __syncthreads();
    const int token0 = 16 * tile;
    constexpr int kTileTokens = kTokenGroups == 1 ? 8 : 16;

    // C fragment element j of lane l: token g + 8 (j / 2), row 2c + (j % 2) of the group.
    const float* flat = &partial[0][0][0].x;
    if constexpr (kSwiglu) {
      const auto warp_sum = [&](int q, int t) {  // weight row q of the CTA and token t of the tile, as the plain
                                                 // kernel sums it
        const int i = (q >> 3) * 128 + ((t & 7) * 4 + ((q & 7) >> 1)) * 4 + (t >> 3) * 2 + (q & 1);
        float sum = 0.0f;
        for (int w = 0; w < warps; ++w) sum += flat[w * kTileFloats + i];
        return round_to_bf16(sum * input_scale(token0 + t));
      };
      for (int i = threadIdx.x; i < kHalfRows * kTileTokens; i += blockDim.x) {
        const int o = i % kHalfRows, t = i / kHalfRows;
        if (token0 + t >= tokens) continue;
        store_output(out, static_cast<int64_t>(token0 + t) * n + row0 + o,
                     silu_mul(warp_sum(o, t), warp_sum(o + kHalfRows, t)));
      }
    } else {
      // blockDim.x and kTileFloats are multiples of 32, so i % 32 is the lane and every lane takes each pass.
      for (int i = threadIdx.x; i < kTileFloats; i += blockDim.x) {
        const int r = i / 128, l = (i >> 2) & 31, j = i & 3;
        const int token = token0 + (l >> 2) + 8 * (j >> 1);
        const int row = row0 + r * 8 + 2 * (l & 3) + (j & 1);
        const bool stored = token < tokens && row < n;
        float sum = 0.0f;
        if (stored) {
          for (int w = 0; w < warps; ++w) sum += flat[w * kTileFloats + i];
          sum *= input_scale(token);
          if (bias != nullptr) sum += __bfloat162float(bias[row]);
        }
        if constexpr (kNorm == NormFold::kAddResidual) {
          finish_residual_output(
              stored, sum, [&] { return __bfloat162float(residual_rows[token][row - row0]); },
              [&] { return __bfloat162float(norm_weights[row - row0]); }, token, tokens, row, n, lane, norm, out);
        } else if (stored) {
          store_output(out, static_cast<int64_t>(token) * n + row, sum);
        }
      }
    }
  }
}

// Row groups per warp: more groups cut x's L2 traffic (every CTA reads all of x: T / (8 R) bf16 values per W
// element) but also the number of CTAs; keep at least one CTA per SM, with two exceptions below. FP8 codes take half
// the groups: their rounds hold twice the k of a bf16 round in the same registers, and more, smaller CTAs measured
// faster there, where bf16 lost (results.md R65).
// Above 16 tokens (bf16 weights) x's traffic is twice as large and sets the choice: the most groups that leave
// 0.4 CTAs an SM, fewer where that grid is between one and two waves (one CTA an SM fits) (results.md R116).
// Up to 16 tokens, a projection whose one-group grid is a single wave and whose rows are short (Qwen3-0.6B's
// o_proj: 128 CTAs, k = 2048) takes two groups from 3 tokens on, though half the SMs are then left without a CTA:
// x is read half as often and each CTA's share of the weight (16 rows, at most 64 KiB) is still in flight at once.
// The same for longer rows (down, k = 3072), and one group for qkv and gate_up at 3-8 tokens, lost in the decode
// step though some were faster alone (docs/kernels/gemv.md, "Row groups"; results.md R128, R129).
constexpr int kTwoGroupMaxK = 2048;
int ctas_for(int n, int groups) { return (n + kRowsPerGroup * groups - 1) / (kRowsPerGroup * groups); }
int row_groups_for(int tokens, int n, int k, int sm_count, bool fp8) {
  if (tokens > kGemvMaxTokensAnyWeight) {
    int groups = kMaxRowGroups;
    while (groups > 1 && 5 * ctas_for(n, groups) < 2 * sm_count) groups /= 2;
    if (groups > 1 && ctas_for(n, groups) > sm_count && ctas_for(n, groups) < 2 * sm_count) groups /= 2;
    return groups;
  }
  int groups = fp8 ? (tokens <= 8 ? 1 : 2) : (tokens <= 2 ? 1 : tokens <= 8 ? 2 : 4);
  const bool short_one_wave = !fp8 && ctas_for(n, 1) <= sm_count && k <= kTwoGroupMaxK;
  const int fewest = short_one_wave && tokens >= 3 ? 2 : 1;
  while (groups > fewest && ctas_for(n, groups) < sm_count) groups /= 2;
  return groups;
}

// Row groups, and token slices of 16 (gridDim.y). Above 16 tokens every CTA reads the x of all of them, twice what
// it reads of its weight rows at two groups. Where the grid row_groups_for gives then leaves SMs without a CTA
// (Qwen3-0.6B's o_proj and down at n = 1024: 64 CTAs of 16 rows), the call runs as two slices of 16 tokens, each
// slice's CTAs reading their half of x and the same weight rows, at the fewest row groups whose two slices fit one
// wave (two groups there: 128 CTAs). Each CTA then reads half the x and twice the SMs stream; the weight should still
// come from memory about once, both slices' CTAs being resident together (expected, not measured). At most two row
// groups a slice: at four, Qwen3-0.6B's o_proj and down were no faster alone and Qwen3-1.7B's (n = 2048) made its
// step slower. qkv and gate_up have no such layout and measured slower sliced; so did slices of 8 for 9-16 tokens,
// where one mma tile already holds every token (docs/kernels/gemv.md, "Token slices"; results.md R138-R141, R144).
struct GemvLayout {
  int row_groups;
  int token_slices;
};
constexpr int kMaxSliceRowGroups = 2;  // four (32 rows a CTA): no faster alone, slower in Qwen3-1.7B's step (R144)
GemvLayout layout_for(int tokens, int n, int k, int sm_count, bool fp8) {
  const int groups = row_groups_for(tokens, n, k, sm_count, fp8);
  if (fp8 || tokens <= kSliceTokens || ctas_for(n, groups) >= sm_count) return {groups, 1};
  const int slices = (tokens + kSliceTokens - 1) / kSliceTokens;
  for (int sliced = 1; sliced <= kMaxSliceRowGroups; sliced *= 2)
    if (slices * ctas_for(n, sliced) <= sm_count) return {sliced, slices};
  return {groups, 1};
}

// Warps a CTA: one per kUnroll steps of k, at most kMaxWarps, so that a CTA's weights are in flight at once. But a
// grid several waves deep runs better as smaller CTAs that share an SM: the kernel's registers leave room for one
// 16-warp CTA an SM, so each wave's tail and the next CTAs' first loads were not overlapped. There the k steps go
// to balanced rounds of at most 4 warps (FP8) or 8 (bf16) (Qwen3-8B's projections, results.md R57, R64; on an H100
// bf16 at T = 4-8 lost 3% where the H200 gained 2%, and the rule was kept for the H200, R71). A one-wave grid
// (Qwen3-0.6B's o_proj and down) measured slower capped, and so, it seems, did a grid of many waves, whose tails are
// already amortised (Qwen3-8B's lm_head): both keep their warps (docs/kernels/gemv.md, "Loads in flight").
int warps_for(bool fp8, int warp_steps, int ctas, int sm_count) {
  const int warps = std::clamp(warp_steps, 1, kMaxWarps);
  if (ctas < 2 * sm_count || ctas > 32 * sm_count) return warps;
  const int cap = fp8 ? 4 : 8;
  const int rounds = (warp_steps + cap - 1) / cap;
  return std::clamp((warp_steps + rounds - 1) / rounds, 1, kMaxWarps);
}

template <int kTokenGroups, int kRowGroups, typename OutT, bool kSwiglu, NormFold kNorm>
void launch(const GemvArgs& a, int token_slices, int sm_count, cudaStream_t stream) {
  const bool fp8 = a.weight_fp8 != nullptr;
  const int unroll = unroll_for(kRowGroups, kTokenGroups);
  const int steps = (a.k + step_k(fp8) - 1) / step_k(fp8);
  const int rows_per_cta = kRowsPerGroup * kRowGroups;
  // kSwiglu: n outputs from 2n weight rows, half a CTA's rows each (n % (4 kRowGroups) == 0: no partial CTA).
  const int ctas = kSwiglu ? a.n / (rows_per_cta / 2) : (a.n + rows_per_cta - 1) / rows_per_cta;
  const int warps = warps_for(fp8, (steps + unroll - 1) / unroll, ctas, sm_count);
  const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(token_slices));
  const dim3 block(static_cast<unsigned>(warps * 32));
  const void* weight = fp8 ? static_cast<const void*>(a.weight_fp8) : static_cast<const void*>(a.weight);
  // FP8 codes take the integer pipes in weights under kIntegerCodesMaxWeight elements (the fused call's is 2n x k),
  // the conversion instructions above; gemv_supports gives the fused call only the first, so only the plain
  // kernel has the second.
  const bool integer_codes = fp8 && static_cast<int64_t>(a.n) * (kSwiglu ? 2 : 1) * a.k < kIntegerCodesMaxWeight;
  auto kernel = gemv_kernel<kTokenGroups, kRowGroups, OutT, false, false, kSwiglu, kNorm>;
  if (token_slices > 1) {  // layout_for gives slices to bf16 weights at up to kMaxSliceRowGroups only
    if constexpr (kTokenGroups == 2 && kRowGroups <= kMaxSliceRowGroups) {
      if (fp8) throw EngineError("gemv: token slices of FP8 codes");
      kernel = gemv_kernel<2, kRowGroups, OutT, false, false, kSwiglu, kNorm, true>;
    } else {
      throw EngineError("gemv: no token-slice kernel for " + std::to_string(kRowGroups) + " row groups");
    }
  }
  if constexpr (kTokenGroups <= 2) {  // FP8 codes: up to 16 tokens (gemv_supports)
    if (integer_codes) kernel = gemv_kernel<kTokenGroups, kRowGroups, OutT, true, true, kSwiglu, kNorm>;
    if constexpr (!kSwiglu) {
      if (fp8 && !integer_codes) kernel = gemv_kernel<kTokenGroups, kRowGroups, OutT, true, false, false, kNorm>;
    }
  }
  launch_programmatic("gemv_kernel", kernel, grid, block, 0, stream, a.x, weight, a.block_scale, a.bias,
                      static_cast<OutT*>(a.out), a.tokens, a.n, a.k, a.norm);
}

template <int kTokenGroups, typename OutT, bool kSwiglu, NormFold kNorm>
void launch_with_groups(const GemvArgs& a, GemvLayout layout, int sm_count, cudaStream_t stream) {
  switch (layout.row_groups) {
    case 1:
      return launch<kTokenGroups, 1, OutT, kSwiglu, kNorm>(a, layout.token_slices, sm_count, stream);
    case 2:
      return launch<kTokenGroups, 2, OutT, kSwiglu, kNorm>(a, layout.token_slices, sm_count, stream);
    default:
      return launch<kTokenGroups, 4, OutT, kSwiglu, kNorm>(a, layout.token_slices, sm_count, stream);
  }
}

template <typename OutT, bool kSwiglu = false, NormFold kNorm = NormFold::kNone>
void launch_with_out(const GemvArgs& a, GemvLayout layout, int sm_count, cudaStream_t stream) {
  const int tokens = layout.token_slices > 1 ? kSliceTokens : a.tokens;  // a slice runs as a call of its own
  if (tokens <= 8) return launch_with_groups<1, OutT, kSwiglu, kNorm>(a, layout, sm_count, stream);
  if (tokens <= 16) return launch_with_groups<2, OutT, kSwiglu, kNorm>(a, layout, sm_count, stream);
  return launch_with_groups<4, OutT, kSwiglu, kNorm>(a, layout, sm_count, stream);
}

// The layout of a call: the fused call takes the plain call's over its 2n weight rows (the same CTAs and k-split).
GemvLayout layout_of(const GemvArgs& a, int sm_count) {
  return layout_for(a.tokens, a.swiglu ? 2 * a.n : a.n, a.k, std::max(sm_count, 1), a.weight_fp8 != nullptr);
}

// gemv_max_tokens of these arguments' weight.
int max_tokens_of(const GemvArgs& a) {
  return gemv_max_tokens(int64_t{a.n} * (a.swiglu ? 2 : 1) * a.k, a.weight_fp8 != nullptr);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// GemvNormSum pointers, null included, at the type's alignment (a line a word).
bool norm_sums_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % alignof(GemvNormSum) == 0; }

}  // namespace

int gemv_max_tokens(int64_t weight_elements, bool fp8_codes) {
  return !fp8_codes && weight_elements < kGemvMaxWideWeight ? kGemvMaxTokens : kGemvMaxTokensAnyWeight;
}

bool gemv_supports(const GemvArgs& a) {
  // FP8: whole 16-code lane chunks (k % 16 == 0).
  const bool weight_ok = a.weight_fp8 != nullptr ? a.weight == nullptr && a.block_scale != nullptr &&
                                                       aligned16(a.weight_fp8) && a.k % 16 == 0
                                                 : a.weight != nullptr && aligned16(a.weight);
  // The fused SiLU: whole CTAs of up to 4 row groups on each half, bf16 out, no bias; FP8 codes only where they
  // take the integer pipes. Above that bound it measured slower than the two calls apart (H100, Qwen3-8B's
  // gate_up at T = 1, three rounds: 3.84 against 3.75 ms a token), where it is faster for bf16 weights and for
  // FP8 under the bound (Qwen3-0.6B: 0.85 against 0.90); why is not established.
  const bool swiglu_ok =
      !a.swiglu || (a.n % (4 * kMaxRowGroups) == 0 && a.bias == nullptr && a.out_dtype == DType::BF16 &&
                    (a.weight_fp8 == nullptr || int64_t{2} * a.n * a.k < kIntegerCodesMaxWeight));
  // A folded norm: one side a call, BF16 out; the call before it plain with the norm's operands, its stale sums
  // apart from the sums it adds to.
  const NormFold fold = norm_fold_of(a);
  const auto stale_apart = [&] {
    const GemvNormSum *sums = a.norm.sum_squares, *stale = a.norm.stale_sums;
    return a.norm.stale_sum_count == 0 ||
           (stale != nullptr && (stale + a.norm.stale_sum_count <= sums || sums + a.tokens <= stale));
  };
  const bool norm_ok =
      fold == NormFold::kNone ||
      (a.out_dtype == DType::BF16 &&
       (fold == NormFold::kAddResidual
            ? a.norm.input_sum_squares == nullptr && !a.swiglu && a.bias == nullptr && a.n % 8 == 0 &&
                  a.n <= kGemvMaxNormWidth && aligned16(a.norm.residual) && aligned16(a.norm.norm_weight) &&
                  a.norm.sum_squares != nullptr && norm_sums_aligned(a.norm.sum_squares) &&
                  norm_sums_aligned(a.norm.stale_sums) && a.norm.stale_sum_count >= 0 && stale_apart()
            : norm_sums_aligned(a.norm.input_sum_squares)));
  return a.tokens >= 1 && a.tokens <= max_tokens_of(a) && a.n >= 1 && a.k >= 8 && a.k % 8 == 0 && a.x != nullptr &&
         weight_ok && a.out != nullptr && aligned16(a.x) && (a.out_dtype == DType::BF16 || a.out_dtype == DType::F32) &&
         swiglu_ok && norm_ok;
}

std::string gemv_requirements(const GemvArgs& a) {
  return "1 <= tokens <= " + std::to_string(max_tokens_of(a)) +
         ", k % 8 == 0, 16-byte aligned x and weight, BF16 or F32 out" +
         (a.swiglu ? "; fused SiLU: n % 16 == 0, no bias, BF16 out, FP8 codes under 32 M elements" : "") +
         (norm_fold_of(a) == NormFold::kAddResidual
              ? "; residual add: BF16 out, no bias, no SiLU, n % 8 == 0, n <= " + std::to_string(kGemvMaxNormWidth) +
                    ", aligned residual, norm weight and sums, stale sums apart from the sums"
          : norm_fold_of(a) == NormFold::kScaleByInputRms
              ? std::string("; scaled by the input's rms: BF16 out, aligned sums")
              : std::string());
}

int gemv_token_slices(const GemvArgs& a, int sm_count) { return layout_of(a, sm_count).token_slices; }

void launch_gemv(const GemvArgs& a, int sm_count, cudaStream_t stream) {
  if (!launch_gemv_streamed_if_taken(a, sm_count, stream)) launch_gemv_rounds(a, sm_count, stream);
}

void launch_gemv_rounds(const GemvArgs& a, int sm_count, cudaStream_t stream) {
  if (!gemv_supports(a)) {
    throw InvalidInput("gemv: unsupported call tokens=" + std::to_string(a.tokens) + " n=" + std::to_string(a.n) +
                       " k=" + std::to_string(a.k) + " (needs " + gemv_requirements(a) + ")");
  }
  sm_count = std::max(sm_count, 1);
  const GemvLayout layout = layout_of(a, sm_count);
  using Bf16 = __nv_bfloat16;
  switch (norm_fold_of(a)) {
    case NormFold::kAddResidual:
      return launch_with_out<Bf16, false, NormFold::kAddResidual>(a, layout, sm_count, stream);
    case NormFold::kScaleByInputRms:
      if (a.swiglu) return launch_with_out<Bf16, true, NormFold::kScaleByInputRms>(a, layout, sm_count, stream);
      return launch_with_out<Bf16, false, NormFold::kScaleByInputRms>(a, layout, sm_count, stream);
    case NormFold::kNone:
      break;
  }
  if (a.swiglu) return launch_with_out<Bf16, true>(a, layout, sm_count, stream);
  if (a.out_dtype == DType::F32) return launch_with_out<float>(a, layout, sm_count, stream);
  launch_with_out<Bf16>(a, layout, sm_count, stream);
}

}  // namespace nanovllm::cuda
