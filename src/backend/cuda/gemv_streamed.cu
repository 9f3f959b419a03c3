// The streamed skinny linear (gemv_streamed.h; docs/kernels/gemv.md, "Streamed"). CTA b of the grid owns the output
// groups [G b / grid, G (b + 1) / grid) of 8 rows (with the fused SiLU, 8 outputs: 8 gate rows and the 8 up rows of
// the same outputs), a contiguous byte range of the weight (two with the SiLU). Its last warp names each group in its
// first stage and copies it kChunkK columns of a group's 8 rows at a time (one bulk copy a row, issued by 8 lanes)
// into a ring of kStages shared-memory stages; the other warps take each landed stage together, an eighth of its
// columns each, with the permuted mma.m16n8k16 of gemv.cu (A = x: 16 token slots, B = W^T: the group's 8 rows), and
// after a group's last stage add their partial tiles through shared memory and finish the group's outputs as gemv.cu
// does: the input's 1 / rms, the bias, SiLU(gate) x up, or the residual add and the next norm's sums.
#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_wgmma.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/gemv_streamed.h"
#include "backend/cuda/programmatic_launch.cuh"
#include "backend/cuda/silu.cuh"
#include "backend/cuda/sm90a_code.h"

namespace nanovllm::cuda {
namespace {

using attention_detail::smem_address;
using gemv_detail::finish_residual_output;
using gemv_detail::NormFold;

constexpr int kRowsPerGroup = 8;  // the mma's N
// 8 warps measured 0.7-1% faster than 4 in Qwen3-8B's batch-1 and batch-4 decode; 12 no faster, 16 slower (H100;
// docs/kernels/gemv.md, "Streamed").
constexpr int kComputeWarps = 8;  // each takes an eighth of every stage's columns
constexpr int kThreads = (kComputeWarps + 1) * 32;
constexpr int kTileFloats = 32 * 4;               // one warp's C fragments
constexpr int kEpilogueWarps = kTileFloats / 32;  // the epilogue: one tile element a thread of the first 4 warps
// The ring (bench_gemv, Qwen3-8B's projections at T = 1): 1,536 columns x 4 stages (~100 KiB) measured faster than
// 2,048 x 3, 1,024 x 6 and 1,024 x 7 on an H200, and than half the ring (1,536 x 2, 1,024 x 3), which would let the
// next call's CTA in beside this one, on an H100. Copies of 1 KiB (512 columns x 12, issued by one lane) ran at half
// the bandwidth, ~60 ns a copy (computed), so a row's copy is a few KiB (docs/kernels/gemv.md, "Streamed").
constexpr int kChunkK = 1536;
constexpr int kStages = 4;
constexpr int kWarpK = kChunkK / kComputeWarps;
constexpr int kWarpSteps = kWarpK / 32;  // steps of 32 columns (two mmas) a warp takes of a stage
constexpr int kPassSteps = 6;            // steps a pass: its x and weight registers
constexpr int kAccumulators = 3;         // independent mma chains, each step's mmas on one of them
static_assert(kWarpSteps % kPassSteps == 0 && kPassSteps % kAccumulators == 0, "whole passes, even chains");
// A stage's rows lie 64 bytes further apart than their length: lane quad g reads 64 bytes of row g, and rows g and
// g + 1 then start 16 banks apart, so a warp's 16-byte loads take the four wavefronts of their 512 bytes.
constexpr int kRowStrideBytes = kChunkK * 2 + 64;
constexpr int kStageBytes = kRowsPerGroup * kRowStrideBytes;
// The ring, its full and empty barriers, two sets of the warps' partial tiles, and each token's 1 / rms.
constexpr size_t kBarrierOffset = size_t{kStages} * kStageBytes;
constexpr size_t kTileOffset = kBarrierOffset + 2 * kStages * sizeof(uint64_t);
constexpr size_t kInvRmsOffset = kTileOffset + 2 * kComputeWarps * kTileFloats * sizeof(float);
constexpr size_t kStageGroupOffset = kInvRmsOffset + kGemvStreamedMaxTokens * sizeof(float);
constexpr size_t kSharedBytes = kStageGroupOffset + kStages * sizeof(int);
static_assert(kSharedBytes <= kStepSharedMemoryBytes, "the decode step's shared split holds one CTA");

// Named barrier 1 over the computing warps (the copying warp never joins it).
__device__ __forceinline__ void compute_warps_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kComputeWarps * 32) : "memory");
}

// kTokenGroups: 1 for up to 8 tokens (the tile's rows 8-15 zero), 2 for up to 16. kSwiglu and kNorm: GemvArgs'
// swiglu and folded norm, finished as gemv.cu finishes them, so the outputs are the same bits for the same sums.
template <int kTokenGroups, typename OutT, bool kSwiglu, NormFold kNorm>
__global__ void __launch_bounds__(kThreads, 1)
    gemv_streamed_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                         const __nv_bfloat16* __restrict__ bias, OutT* __restrict__ out, int tokens, int n, int k,
                         NormFoldParams norm) {
#ifdef NANOVLLM_WGMMA
  using attention_detail::bulk_copy_to_shared;
  using attention_detail::mbarrier_arrive;
  using attention_detail::mbarrier_arrive_expect_tx;
  using attention_detail::mbarrier_init;
  using attention_detail::mbarrier_wait;
  static_assert(!kSwiglu || std::is_same_v<OutT, __nv_bfloat16>, "the fused SiLU writes bf16");
  static_assert(kNorm == NormFold::kNone || std::is_same_v<OutT, __nv_bfloat16>, "a folded norm writes bf16");
  static_assert(kNorm != NormFold::kAddResidual || !kSwiglu, "the residual's call is a plain one");
  extern __shared__ __align__(128) unsigned char shared[];
  const uint32_t stages = smem_address(shared);
  const uint32_t full = stages + kBarrierOffset;  // kStages barriers: a stage landed
  const uint32_t empty = full + kStages * 8;      // kStages barriers: every computing thread has read it
  auto* partial = reinterpret_cast<float4*>(shared + kTileOffset);  // [2][warps][32]
  auto* inv_rms = reinterpret_cast<float*>(shared + kInvRmsOffset);
  // The output group whose first stage a slot holds, written by the copying warp before the stage's arrival: the
  // computing warps learn each group from it, and -1 (a stage without bytes) ends their loop. They could count the
  // groups themselves, as the copying warp does; this layout measured 0.5-0.7% faster in Qwen3-8B's decode than both
  // sides counting stages (docs/kernels/gemv.md, "Streamed").
  auto* stage_group = reinterpret_cast<int*>(shared + kStageGroupOffset);

  allow_next_grid();
  constexpr int kHalves = kSwiglu ? 2 : 1;  // weight groups an output group: gate and up rows
  const int out_groups = (n + kRowsPerGroup - 1) / kRowsPerGroup;
  const int first_group = static_cast<int>(int64_t{out_groups} * blockIdx.x / gridDim.x);
  const int end_group = static_cast<int>(int64_t{out_groups} * (blockIdx.x + 1) / gridDim.x);
  const int chunks = (k + kChunkK - 1) / kChunkK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full + 8 * s, 1);
      mbarrier_init(empty + 8 * s, kComputeWarps * 32);
    }
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  if (warp == kComputeWarps) {  // the copying warp: weights are constant, so no wait for the previous kernel
    if (lane >= kRowsPerGroup) return;
    int s = 0;
    for (int group = first_group < end_group ? first_group : -1;; group = group + 1 < end_group ? group + 1 : -1) {
      for (int half = 0; half < kHalves; ++half) {
        for (int chunk = 0; chunk < chunks; ++chunk, ++s) {
          const int slot = s % kStages, use = s / kStages;
          if (lane == 0) {
            if (use > 0) mbarrier_wait(empty + 8 * slot, (use - 1) & 1);
            if (half == 0 && chunk == 0) stage_group[slot] = group;
          }
          if (group < 0) {  // the end, as a stage without bytes
            if (lane == 0) mbarrier_arrive(full + 8 * slot);
            return;
          }
          const int k0 = chunk * kChunkK;
          const int row0 = half == 1 ? n + group * kRowsPerGroup : group * kRowsPerGroup;
          const uint32_t row_bytes = static_cast<uint32_t>(min(kChunkK, k - k0)) * 2;
          // Rows past n (a last partial group, never with the SiLU) are left as they are: their outputs are not
          // stored.
          const int rows = min(kRowsPerGroup, n - group * kRowsPerGroup);
          if (lane == 0) mbarrier_arrive_expect_tx(full + 8 * slot, static_cast<uint32_t>(rows) * row_bytes);
          __syncwarp(0xffu);
          if (lane < rows)  // lane r copies row r
            bulk_copy_to_shared(stages + slot * kStageBytes + lane * kRowStrideBytes,
                                weight + (static_cast<int64_t>(row0) + lane) * k + k0, row_bytes, full + 8 * slot);
        }
      }
    }
  }

  wait_for_previous_grid();  // x, the norm's sums and the residual are the previous kernels' outputs
  if constexpr (kNorm == NormFold::kScaleByInputRms) {
    if (threadIdx.x < static_cast<unsigned>(tokens)) {
      const GemvNormSum& sum = norm.input_sum_squares[threadIdx.x];
      inv_rms[threadIdx.x] =
          rsqrtf(gemv_detail::norm_sum_value(sum.whole, sum.fraction) / static_cast<float>(k) + norm.eps);
    }
    compute_warps_sync();
  }
  if constexpr (kNorm == NormFold::kAddResidual) {
    if (blockIdx.x == 0)
      for (int i = threadIdx.x; i < 2 * norm.stale_sum_count; i += kComputeWarps * 32)
        (i % 2 == 0 ? norm.stale_sums[i / 2].whole : norm.stale_sums[i / 2].fraction) = 0;
  }
  const int g = lane >> 2, c = lane & 3;
  const __nv_bfloat16* x_row[kTokenGroups];
  bool x_live[kTokenGroups];
#pragma unroll
  for (int h = 0; h < kTokenGroups; ++h) {
    x_live[h] = g + 8 * h < tokens;
    x_row[h] = x + static_cast<int64_t>(x_live[h] ? g + 8 * h : 0) * k;
  }
  // The epilogue's element of a group's tile (threads of the first kEpilogueWarps warps): thread i sums element i % 4
  // of lane i / 4's fragments, token (l / 4) + 8 (j / 2) and row 2 (l % 4) + j % 2 of the group.
  const int l = threadIdx.x >> 2, j = threadIdx.x & 3;
  const int token = (l >> 2) + 8 * (j >> 1), group_row = 2 * (l & 3) + (j & 1);
  float gate = 0.0f;                                      // kSwiglu: this element's gate product, rounded
  __nv_bfloat16 residual_in = __float2bfloat16_rn(0.0f);  // kAddResidual: loaded at the group's first stage
  __nv_bfloat16 norm_weight = residual_in;
  float accs[kAccumulators][4] = {};
  int group = 0, chunk = -1, weight_group = -1;  // weight_group: the stages' half-groups so far, for the tiles' parity
  int out_row = 0;  // this thread's epilogue element's output row, and whether it is stored
  bool stored = false;
  for (int s = 0;; ++s) {
    if (++chunk == chunks) chunk = 0;
    if (chunk == 0) ++weight_group;
    const int half = weight_group % kHalves;
    const int slot = s % kStages, use = s / kStages;
    const int k0 = chunk * kChunkK, chunk_k = min(kChunkK, k - k0);
    const bool names_group = half == 0 && chunk == 0;  // a group's first stage names it (stage_group)
    // In passes of kPassSteps: each pass's x loads first (they do not wait for the stage), then its weights from the
    // stage, then its mmas; the stage is released once the last pass has read it.
#pragma unroll
    for (int pass = 0; pass < kWarpSteps / kPassSteps; ++pass) {
      uint4 wv[kPassSteps], xv[kPassSteps][kTokenGroups];
#pragma unroll
      for (int u = 0; u < kPassSteps; ++u) {
        const int kk = warp * kWarpK + (pass * kPassSteps + u) * 32 + 8 * c;
#pragma unroll
        for (int h = 0; h < kTokenGroups; ++h)
          xv[u][h] = gemv_detail::load_activation_or_zero(x_row[h] + k0 + kk, kk < chunk_k && x_live[h]);
      }
      if (pass == 0) {
        mbarrier_wait(full + 8 * slot, use & 1);
        if (names_group) {
          group = stage_group[slot];
          out_row = group * kRowsPerGroup + group_row;
          stored = group >= 0 && warp < kEpilogueWarps && token < tokens && out_row < n;
          if constexpr (kNorm == NormFold::kAddResidual) {
            if (stored) {  // in flight while the group's stages are multiplied
              residual_in = norm.residual[static_cast<int64_t>(token) * n + out_row];
              norm_weight = norm.norm_weight[out_row];
            }
          }
        }
      }
      if (group < 0) break;  // the end (the x loads above are of no use)
      const unsigned char* row = shared + slot * kStageBytes + g * kRowStrideBytes;
#pragma unroll
      for (int u = 0; u < kPassSteps; ++u) {
        const int kk = warp * kWarpK + (pass * kPassSteps + u) * 32 + 8 * c;
        wv[u] = kk < chunk_k ? *reinterpret_cast<const uint4*>(row + kk * 2) : make_uint4(0, 0, 0, 0);
      }
      // Every thread releases its own reads (one arrival a warp after __syncwarp is ordered as well, but the
      // sanitizer's race check follows arrivals thread by thread).
      if (pass == kWarpSteps / kPassSteps - 1) mbarrier_arrive(empty + 8 * slot);
#pragma unroll
      for (int u = 0; u < kPassSteps; ++u) {
        const uint4 lo = xv[u][0], hi = kTokenGroups > 1 ? xv[u][kTokenGroups - 1] : make_uint4(0, 0, 0, 0);
        gemv_detail::mma_bf16_m16n8k16(accs[u % kAccumulators], lo.x, hi.x, lo.y, hi.y, wv[u].x, wv[u].y);
        gemv_detail::mma_bf16_m16n8k16(accs[u % kAccumulators], lo.z, hi.z, lo.w, hi.w, wv[u].z, wv[u].w);
      }
    }
    if (group < 0) break;
    if (chunk != chunks - 1) continue;

    // The weight group's last stage: the warps' partial tiles, alternating buffers so that one barrier a group
    // suffices (a thread writes a buffer again only after every thread has passed the barrier of the group between).
    float4* tiles = partial + (weight_group & 1) * kComputeWarps * 32;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int a = 0; a < kAccumulators; ++a) {
      acc.x += accs[a][0], acc.y += accs[a][1], acc.z += accs[a][2], acc.w += accs[a][3];
      accs[a][0] = accs[a][1] = accs[a][2] = accs[a][3] = 0.0f;
    }
    tiles[warp * 32 + lane] = acc;
    compute_warps_sync();
    float sum = 0.0f;
    if (stored) {
      const float* flat = &tiles[0].x;
#pragma unroll
      for (int w = 0; w < kComputeWarps; ++w) sum += flat[w * kTileFloats + threadIdx.x];
      if constexpr (kNorm == NormFold::kScaleByInputRms) sum *= inv_rms[token];
      if (bias != nullptr) sum += __bfloat162float(bias[out_row]);
    }
    const int64_t at = static_cast<int64_t>(token) * n + out_row;
    if constexpr (kSwiglu) {
      if (half == 0) {
        gate = gemv_detail::round_to_bf16(sum);
      } else if (stored) {
        gemv_detail::store_output(out, at, silu_mul(gate, gemv_detail::round_to_bf16(sum)));
      }
    } else if constexpr (kNorm == NormFold::kAddResidual) {
      if (warp < kEpilogueWarps)  // whole warps: its sums are shuffled within one
        finish_residual_output(
            stored, sum, [&] { return __bfloat162float(residual_in); }, [&] { return __bfloat162float(norm_weight); },
            token, tokens, out_row, n, lane, norm, out);
    } else if (stored) {
      gemv_detail::store_output(out, at, sum);
    }
  }
#endif
}

template <int kTokenGroups, typename OutT, bool kSwiglu = false, NormFold kNorm = NormFold::kNone>
void launch(const GemvArgs& a, int sm_count, cudaStream_t stream) {
  const int out_groups = (a.n + kRowsPerGroup - 1) / kRowsPerGroup;
  const int ctas = std::clamp(out_groups, 1, std::max(sm_count, 1));
  auto kernel = gemv_streamed_kernel<kTokenGroups, OutT, kSwiglu, kNorm>;
  attention_detail::allow_dynamic_smem(kernel, kSharedBytes, "gemv_streamed");
  launch_programmatic("gemv_streamed_kernel", kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), kSharedBytes,
                      stream, a.x, a.weight, a.bias, static_cast<OutT*>(a.out), a.tokens, a.n, a.k, a.norm);
}

template <typename OutT, bool kSwiglu = false, NormFold kNorm = NormFold::kNone>
void launch_with_tokens(const GemvArgs& a, int sm_count, cudaStream_t stream) {
  if (a.tokens > 8) return launch<2, OutT, kSwiglu, kNorm>(a, sm_count, stream);
  launch<1, OutT, kSwiglu, kNorm>(a, sm_count, stream);
}

// The launch itself, for arguments already checked.
void launch_checked(const GemvArgs& a, int sm_count, cudaStream_t stream) {
  using Bf16 = __nv_bfloat16;
  switch (gemv_detail::norm_fold_of(a)) {
    case NormFold::kAddResidual:
      return launch_with_tokens<Bf16, false, NormFold::kAddResidual>(a, sm_count, stream);
    case NormFold::kScaleByInputRms:
      if (a.swiglu) return launch_with_tokens<Bf16, true, NormFold::kScaleByInputRms>(a, sm_count, stream);
      return launch_with_tokens<Bf16, false, NormFold::kScaleByInputRms>(a, sm_count, stream);
    case NormFold::kNone:
      break;
  }
  if (a.swiglu) return launch_with_tokens<Bf16, true>(a, sm_count, stream);
  if (a.out_dtype == DType::F32) return launch_with_tokens<float>(a, sm_count, stream);
  launch_with_tokens<Bf16>(a, sm_count, stream);
}

// Why the kernel cannot take these arguments, or empty: what gemv_supports checks (the fold's operands among it), for
// bf16 weights and up to kGemvStreamedMaxTokens tokens; the fused SiLU and the residual's call need whole 8-row
// groups (gemv_supports asks n % 16 and n % 8 of them). Strings are built only for a refusal.
std::string unsupported_because(const GemvArgs& a) {
  if (!sm90a_code_built()) return "this build has no sm_90a code";
  if (a.weight_fp8 != nullptr) return "FP8 codes (the kernel takes bf16 weights)";
  if (a.tokens > kGemvStreamedMaxTokens) return "more than " + std::to_string(kGemvStreamedMaxTokens) + " tokens";
  if (a.weight == nullptr || !gemv_supports(a)) return "needs " + gemv_requirements(a);
  return {};
}

}  // namespace

bool gemv_streamed_supports(const GemvArgs& a) { return unsupported_because(a).empty(); }

bool gemv_streamed_takes(const GemvArgs& a) {
  return a.tokens <= kGemvStreamedRouteMaxTokens && a.k >= kGemvStreamedMinK &&
         int64_t{a.n} * (a.swiglu ? 2 : 1) * a.k >= kGemvStreamedMinWeight && gemv_streamed_supports(a) &&
         sm90a_code_runs_here();
}

bool launch_gemv_streamed_if_taken(const GemvArgs& a, int sm_count, cudaStream_t stream) {
  if (!gemv_streamed_takes(a)) return false;
  launch_checked(a, std::max(sm_count, 1), stream);
  return true;
}

void launch_gemv_streamed(const GemvArgs& a, int sm_count, cudaStream_t stream) {
  if (const std::string why = unsupported_because(a); !why.empty())
    throw InvalidInput("gemv_streamed: unsupported call tokens=" + std::to_string(a.tokens) +
                       " n=" + std::to_string(a.n) + " k=" + std::to_string(a.k) + ": " + why);
  if (!sm90a_code_runs_here())
    throw InvalidInput("gemv_streamed: the current device is not sm_90 (the kernel is sm_90a code)");
  launch_checked(a, std::max(sm_count, 1), stream);
}

}  // namespace nanovllm::cuda
