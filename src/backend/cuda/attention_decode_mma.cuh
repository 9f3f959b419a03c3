#pragma once
// Decode attention on tensor cores: one warp's online softmax over chunks of 16 keys of one KV head, for every
// query head of its GQA group at once (head_dim 128; a bf16 cache, or E4M3 codes).
//
// The CUDA-core key loop spends ~G x 2 x 128 FMAs and a tree of shuffles per key, which for groups of 4 and
// more is more issue slots than the bytes take to arrive. Here the group's heads are the rows of an
// m16n8k16 MMA (rows >= G are zero), so a chunk costs 24 MMAs and at most 16 ldmatrix whatever G:
//   S  (heads x 16 keys)  = Q (heads x 128)   . K^T   2 key tiles x 8 dim steps, K from shared memory as B
//   O^T (128 x heads)    += V^T (128 x 16 keys) . P^T  8 dim tiles, V^T by ldmatrix.trans as A, and P^T as B
// straight from S's accumulators (thread (g, t) holds P[head g][keys 2t, 2t+1, 2t+8, 2t+9], exactly the B
// fragment of column g), so P never leaves registers. The thread's softmax state belongs to head g; its O^T
// accumulators to heads 2t and 2t + 1, whose rescale factors it takes from lanes 8t and 8t + 4.
//
// E4M3 codes become fp16 (exactly, one conversion a pair) and the MMAs run on fp16, as the CUDA-core FP8 loop
// multiplies half pairs: each head's queries are scaled by a power of two that puts their largest magnitude in
// [8, 16) (the power goes back into the fp32 score). ldmatrix moves the codes as 16-bit pairs, so a thread
// receives dims 4t..4t+3 of a key where the bf16 layout has 2t, 2t+1, 2t+8, 2t+9: the MMA's k index is
// permuted the same way on both operands (the dot product does not depend on the order). For V, ldmatrix.trans
// gives a thread keys 2t, 2t+1 of dims 2g, 2g+1; a byte permute makes the pairs of each dim, and an O^T tile's
// rows are dims 2g (rows g) and 2g + 1 (rows g + 8).
//
// K and V reach shared memory by cp.async (stage_decode_chunk), 16 keys of 128 values each, rows
// XOR-swizzled in 16-byte units (unit u of key k at u ^ (k & 7)) so that ldmatrix's 8 rows hit 8 different
// bank groups. P is rounded to bf16 (fp16 with codes) for its MMA, as in the prefill kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/fp8_vec.cuh"

namespace nanovllm::cuda::attention_detail {

constexpr int kMmaDecodeDim = 128;
constexpr int kMmaChunkKeys = 16;  // keys a warp takes per step

// The shared-memory geometry of a chunk: bf16 values or one-byte codes.
template <bool kFp8>
struct MmaChunk {
  static constexpr int kElementBytes = kFp8 ? 1 : 2;
  static constexpr int kRowBytes = kMmaDecodeDim * kElementBytes;  // one key's head vector
  static constexpr int kTileBytes = kMmaChunkKeys * kRowBytes;     // K (or V) of a chunk: 4 or 2 KiB
  static constexpr int kStageBytes = 2 * kTileBytes;               // K then V
  static constexpr int kUnitElements = 16 / kElementBytes;         // values in a 16-byte unit
};

// Byte offset of 16-byte unit `unit` of key `key` (0..15) in a swizzled tile.
template <bool kFp8>
__device__ __forceinline__ uint32_t mma_tile_offset(int key, int unit) {
  return static_cast<uint32_t>(key * MmaChunk<kFp8>::kRowBytes + ((unit ^ (key & 7)) << 4));
}

// Copies keys [key0, key0 + 16) of one KV head (their block starts at element `base`, keys `slot_stride`
// elements apart) into a stage: K at `stage`, V after it. Keys at or past `end` are written as zeros (their
// scores are masked, and zero V keeps 0 x stale bytes from making NaN).
template <bool kFp8>
__device__ __forceinline__ void stage_decode_chunk(uint32_t stage, const void* k_cache, const void* v_cache,
                                                   size_t base, size_t slot_stride, int key0, int end, int lane) {
  using Chunk = MmaChunk<kFp8>;
  constexpr int kUnitsPerRow = Chunk::kRowBytes / 16;
  const auto* k_bytes = static_cast<const char*>(k_cache);
  const auto* v_bytes = static_cast<const char*>(v_cache);
#pragma unroll
  for (int i = 0; i < Chunk::kTileBytes / 16 / 32; ++i) {
    const int c = lane + 32 * i;
    const int key = c / kUnitsPerRow, unit = c % kUnitsPerRow;
    const bool valid = key0 + key < end;
    const size_t byte = (base + (valid ? key * slot_stride : 0) + unit * Chunk::kUnitElements) * Chunk::kElementBytes;
    const uint32_t dst = stage + mma_tile_offset<kFp8>(key, unit);
    cp_async_16(dst, k_bytes + byte, valid ? 16 : 0);
    cp_async_16(dst + Chunk::kTileBytes, v_bytes + byte, valid ? 16 : 0);
  }
}

__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }

// A thread's share of the GQA group's queries as loaded (zero for heads at or past the real group), so that the
// loads can be issued early and converted later. bf16 (the MMA's A fragments as they are): step s holds dims
// 16s + 2t.. and 16s + 2t + 8..; for codes: dims 16s + 4t .. 16s + 4t + 3 (converted by load_queries).
struct MmaQueries {
  uint32_t v[8][2];
};

// q_heads: the row's queries of the group's first head.
template <bool kFp8>
__device__ __forceinline__ MmaQueries fetch_mma_queries(const __nv_bfloat16* q_heads, int group_size, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const bool real = g < group_size;
  const __nv_bfloat16* head = q_heads + g * kMmaDecodeDim;
  MmaQueries r;
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    if constexpr (!kFp8) {
      r.v[s][0] = real ? __ldg(reinterpret_cast<const unsigned*>(head + 16 * s + 2 * t)) : 0u;
      r.v[s][1] = real ? __ldg(reinterpret_cast<const unsigned*>(head + 16 * s + 2 * t + 8)) : 0u;
    } else {
      const uint2 raw = real ? __ldg(reinterpret_cast<const uint2*>(head + 16 * s + 4 * t)) : make_uint2(0, 0);
      r.v[s][0] = raw.x;
      r.v[s][1] = raw.y;
    }
  }
  return r;
}

// One warp's running state over its chunks. G: query heads per KV head (<= 8); heads at or past the real
// group size run on zero queries and are never stored.
template <int G, bool kFp8>
struct DecodeMmaWarp {
  static_assert(G >= 1 && G <= 8, "the heads are the rows g < 8 of the MMA");
  using Chunk = MmaChunk<kFp8>;
  uint32_t q[8][2];           // head g: the A fragment's two pairs of each 16-dim step (see load_queries)
  float acc[8][4];            // O^T: 16 dims x heads 2t and 2t + 1 per tile (see store)
  float run_max = -INFINITY;  // head g, log2 units
  float run_sum = 0.f;        // head g, this thread's keys only (the quad is summed in store())
  float score_scale = 0.f;    // head g: scale x log2(e) (x k_scale x the queries' power of two with codes)

  // The queries as fetch_mma_queries loaded them, converted for the MMAs (codes: fp16 scaled by 2^-power).
  __device__ __forceinline__ void load_queries(const MmaQueries& raw, float scale, float k_scale) {
    score_scale = scale * kLog2e;
    if constexpr (!kFp8) {
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        q[s][0] = raw.v[s][0];
        q[s][1] = raw.v[s][1];
      }
    } else {
      float v[8][4];
      float largest = 0.f;
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.v[s][0]));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.v[s][1]));
        v[s][0] = lo.x;
        v[s][1] = lo.y;
        v[s][2] = hi.x;
        v[s][3] = hi.y;
#pragma unroll
        for (int i = 0; i < 4; ++i) largest = fmaxf(largest, fabsf(v[s][i]));
      }
      largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, 1));
      largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, 2));
      int power = 0;
      if (largest > 0.f && largest <= FLT_MAX) {
        frexpf(largest, &power);  // largest = m * 2^power, m in [0.5, 1)
        power = max(power - 4, -100);
      }
      const float down = ldexpf(1.f, -power);
      score_scale *= k_scale * ldexpf(1.f, power);
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        q[s][0] = half2_bits(__floats2half2_rn(v[s][0] * down, v[s][1] * down));
        q[s][1] = half2_bits(__floats2half2_rn(v[s][2] * down, v[s][3] * down));
      }
    }
#pragma unroll
    for (int m = 0; m < 8; ++m)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][i] = 0.f;
  }

  // The chunk of keys [key0, key0 + 16) staged at `stage`; keys at or past `end` are masked.
  __device__ __forceinline__ void attend_chunk(uint32_t stage, int key0, int end, int lane) {
    const int t = lane & 3;
    const int row = lane & 7, matrix = lane >> 3;
    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = 0.f;
      if constexpr (!kFp8) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {  // 32 dims a load: matrices = dims 32kk + 8 * matrix, keys 8n + row
          uint32_t b[4];
          ldmatrix_x4(b, stage + mma_tile_offset<false>(8 * n + row, 4 * kk + matrix));
          const uint32_t a0[4] = {q[2 * kk][0], 0u, q[2 * kk][1], 0u};
          const uint32_t a1[4] = {q[2 * kk + 1][0], 0u, q[2 * kk + 1][1], 0u};
          mma_bf16_16816(s[n], a0, b[0], b[1]);
          mma_bf16_16816(s[n], a1, b[2], b[3]);
        }
      } else {
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {  // 64 dims a load: matrix = the 16 dims of step 4kk + matrix
          uint32_t b[4];
          ldmatrix_x4(b, stage + mma_tile_offset<true>(8 * n + row, 4 * kk + matrix));
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            const uint32_t a[4] = {q[4 * kk + m][0], 0u, q[4 * kk + m][1], 0u};
            mma_f16_16816(s[n], a, half2_bits(fp8x2_to_half2(b[m])), half2_bits(fp8x2_to_half2(b[m] >> 16)));
          }
        }
      }
    }
    // Head g's scores of keys 8n + 2t + e; the rest of the chunk is on the other lanes of the quad.
    float tile_max = run_max;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool valid = key0 + 8 * n + 2 * t + e < end;
        s[n][e] = valid ? s[n][e] * score_scale : -INFINITY;
        tile_max = fmaxf(tile_max, s[n][e]);
      }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float ref = tile_max == -INFINITY ? 0.f : tile_max;  // no key seen yet: keep the arithmetic NaN-free
    const float correction = exp2f(run_max - ref);
    run_max = tile_max;
    float p[2][2];
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) p[n][e] = exp2f(s[n][e] - ref);
    run_sum = run_sum * correction + (p[0][0] + p[0][1]) + (p[1][0] + p[1][1]);
    // The P^T B fragment: keys 2t.. and 2t + 8.., head g.
    const uint32_t pt0 = kFp8 ? half2_bits(__floats2half2_rn(p[0][0], p[0][1])) : pack_bf16x2(p[0][0], p[0][1]);
    const uint32_t pt1 = kFp8 ? half2_bits(__floats2half2_rn(p[1][0], p[1][1])) : pack_bf16x2(p[1][0], p[1][1]);
    const float corr_even = __shfl_sync(0xffffffffu, correction, 8 * t);
    const float corr_odd = __shfl_sync(0xffffffffu, correction, 8 * t + 4);
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      acc[m][0] *= corr_even;
      acc[m][1] *= corr_odd;
      acc[m][2] *= corr_even;
      acc[m][3] *= corr_odd;
    }
    const uint32_t v_tile = stage + Chunk::kTileBytes;
    if constexpr (!kFp8) {
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        // V^T tile of dims 16m..: matrices (keys 0-7 | 8-15) x (dims 16m.. | 16m + 8..), transposed.
        uint32_t a[4];
        ldmatrix_x4_trans(a, v_tile + mma_tile_offset<false>(8 * (matrix >> 1) + row, 2 * m + (matrix & 1)));
        mma_bf16_16816(acc[m], a, pt0, pt1);
      }
    } else {
#pragma unroll
      for (int mp = 0; mp < 4; ++mp) {
        // Matrices (keys 0-7 | 8-15) x (the 16 dims of tile 2mp | 2mp + 1), transposed: a thread gets keys 2t,
        // 2t + 1 of dims 2g, 2g + 1 (bytes: key 2t dim 2g, key 2t dim 2g+1, key 2t+1 dim 2g, key 2t+1 dim 2g+1).
        uint32_t r[4];
        ldmatrix_x4_trans(r, v_tile + mma_tile_offset<true>(8 * (matrix & 1) + row, 2 * mp + (matrix >> 1)));
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const uint32_t lo = r[2 * u], hi = r[2 * u + 1];  // keys 0-7, keys 8-15 of tile 2mp + u
          const uint32_t lo_pairs = __byte_perm(lo, 0, 0x3120), hi_pairs = __byte_perm(hi, 0, 0x3120);
          const uint32_t a[4] = {half2_bits(fp8x2_to_half2(lo_pairs)), half2_bits(fp8x2_to_half2(lo_pairs >> 16)),
                                 half2_bits(fp8x2_to_half2(hi_pairs)), half2_bits(fp8x2_to_half2(hi_pairs >> 16))};
          mma_f16_16816(acc[2 * mp + u], a, pt0, pt1);
        }
      }
    }
  }

  // The warp's state into the CTA's per-group arrays (group = the warp): unnormalised accumulators against
  // run_max, as the CUDA-core loop leaves them. Tile m's rows: bf16 dims 16m + g and 16m + g + 8; codes dims
  // 16m + 2g and 16m + 2g + 1.
  __device__ __forceinline__ void store(float (*sm_acc)[G][kMmaDecodeDim], float (*sm_max)[G], float (*sm_sum)[G],
                                        int warp, int lane) {
    const int g = lane >> 2, t = lane & 3;
    float sum = run_sum;
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (t == 0 && g < G) {
      sm_max[warp][g] = run_max;
      sm_sum[warp][g] = sum;
    }
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int d_low = kFp8 ? 16 * m + 2 * g : 16 * m + g;
      const int d_high = kFp8 ? d_low + 1 : d_low + 8;
      if (2 * t < G) {
        sm_acc[warp][2 * t][d_low] = acc[m][0];
        sm_acc[warp][2 * t][d_high] = acc[m][2];
      }
      if (2 * t + 1 < G) {
        sm_acc[warp][2 * t + 1][d_low] = acc[m][1];
        sm_acc[warp][2 * t + 1][d_high] = acc[m][3];
      }
    }
  }
};

}  // namespace nanovllm::cuda::attention_detail
