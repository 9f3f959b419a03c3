#pragma once
// Decode attention on tensor cores: one warp's online softmax over chunks of 16 keys of one KV head, for every
// query head of its GQA group at once (bf16 cache, head_dim 128).
//
// The CUDA-core key loop spends ~G x 2 x 128 FMAs and a tree of shuffles per key, which for groups of 4 and
// more is more issue slots than the bytes take to arrive. Here the group's heads are the rows of an
// m16n8k16 MMA (rows >= G are zero), so a chunk costs 24 MMAs and 16 ldmatrix whatever G:
//   S  (heads x 16 keys)  = Q (heads x 128)   . K^T   2 key tiles x 8 dim steps, K from shared memory as B
//   O^T (128 x heads)    += V^T (128 x 16 keys) . P^T  8 dim tiles, V^T by ldmatrix.trans as A, and P^T as B
// straight from S's accumulators (thread (g, t) holds P[head g][keys 2t, 2t+1, 2t+8, 2t+9], exactly the B
// fragment of column g), so P never leaves registers. The thread's softmax state belongs to head g; its O^T
// accumulators to heads 2t and 2t+1, whose rescale factors it takes from lanes 8t and 8t+4.
//
// K and V reach shared memory by cp.async (stage_decode_chunk), 16 keys x 256 bytes each, rows XOR-swizzled
// in 16-byte units (chunk c of key k at c ^ (k & 7)) so that ldmatrix's 8 rows hit 8 different bank groups.
// P is rounded to bf16 for its MMA, as in the prefill kernels.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_mma.cuh"

namespace nanovllm::cuda::attention_detail {

constexpr int kMmaDecodeDim = 128;
constexpr int kMmaChunkKeys = 16;                            // keys a warp takes per step
constexpr int kMmaRowBytes = kMmaDecodeDim * 2;              // one key's bf16 head vector
constexpr int kMmaTileBytes = kMmaChunkKeys * kMmaRowBytes;  // K (or V) of a chunk: 4 KiB
constexpr int kMmaStageBytes = 2 * kMmaTileBytes;            // K then V

// Byte offset of 16-byte unit `unit` (0..15) of key `key` (0..15) in a swizzled tile.
__device__ __forceinline__ uint32_t mma_tile_offset(int key, int unit) {
  return static_cast<uint32_t>(key * kMmaRowBytes + ((unit ^ (key & 7)) << 4));
}

// Copies keys [key0, key0 + 16) of one KV head (their block starts at element `base`, keys `slot_stride`
// elements apart) into a stage: K at `stage`, V after it. Keys at or past `end` are written as zeros (their
// scores are masked, and zero V keeps 0 x stale bytes from making NaN). Every lane issues 8 + 8 copies.
__device__ __forceinline__ void stage_decode_chunk(uint32_t stage, const __nv_bfloat16* k_cache,
                                                   const __nv_bfloat16* v_cache, size_t base, size_t slot_stride,
                                                   int key0, int end, int lane) {
#pragma unroll
  for (int i = 0; i < kMmaTileBytes / 16 / 32; ++i) {
    const int c = lane + 32 * i;
    const int key = c >> 4, unit = c & 15;
    const bool valid = key0 + key < end;
    const size_t element = base + (valid ? key * slot_stride : 0) + unit * 8;
    const uint32_t dst = stage + mma_tile_offset(key, unit);
    cp_async_16(dst, k_cache + element, valid ? 16 : 0);
    cp_async_16(dst + kMmaTileBytes, v_cache + element, valid ? 16 : 0);
  }
}

// One warp's running state over its chunks. G: query heads per KV head (<= 8); heads at or past the real
// group size run on zero queries and are never stored.
template <int G>
struct DecodeMmaWarp {
  static_assert(G >= 1 && G <= 8, "the heads are the rows g < 8 of the MMA");
  uint32_t q[8][2];           // head g, dims 16s + 2t.. and 16s + 2t + 8.. (A fragment, rows g)
  float acc[8][4];            // O^T: dims 16m + g (+ 8), heads 2t and 2t + 1
  float run_max = -INFINITY;  // head g, log2 units
  float run_sum = 0.f;        // head g, this thread's keys only (the quad is summed in store())
  float score_scale = 0.f;

  __device__ __forceinline__ void load_queries(const __nv_bfloat16* q_row_heads, int group_size, float scale,
                                               int lane) {
    const int g = lane >> 2, t = lane & 3;
    score_scale = scale * kLog2e;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      if (g < group_size) {
        const __nv_bfloat16* head = q_row_heads + g * kMmaDecodeDim + 16 * s + 2 * t;
        q[s][0] = __ldg(reinterpret_cast<const unsigned*>(head));
        q[s][1] = __ldg(reinterpret_cast<const unsigned*>(head + 8));
      } else {
        q[s][0] = q[s][1] = 0u;
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
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {  // 32 dims a load: matrices = dims 32kk + 8 * matrix, keys 8n + row
        uint32_t b[4];
        ldmatrix_x4(b, stage + mma_tile_offset(8 * n + row, 4 * kk + matrix));
        const uint32_t a0[4] = {q[2 * kk][0], 0u, q[2 * kk][1], 0u};
        const uint32_t a1[4] = {q[2 * kk + 1][0], 0u, q[2 * kk + 1][1], 0u};
        mma_bf16_16816(s[n], a0, b[0], b[1]);
        mma_bf16_16816(s[n], a1, b[2], b[3]);
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
    const uint32_t pt0 = pack_bf16x2(p[0][0], p[0][1]);  // P^T B fragment: keys 2t.., head g
    const uint32_t pt1 = pack_bf16x2(p[1][0], p[1][1]);  // keys 2t + 8..
    const float corr_even = __shfl_sync(0xffffffffu, correction, 8 * t);
    const float corr_odd = __shfl_sync(0xffffffffu, correction, 8 * t + 4);
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      acc[m][0] *= corr_even;
      acc[m][1] *= corr_odd;
      acc[m][2] *= corr_even;
      acc[m][3] *= corr_odd;
      // V^T tile of dims 16m..: matrices (keys 0-7 | 8-15) x (dims 16m.. | 16m + 8..), transposed.
      uint32_t a[4];
      ldmatrix_x4_trans(a, stage + kMmaTileBytes + mma_tile_offset(8 * (matrix >> 1) + row, 2 * m + (matrix & 1)));
      mma_bf16_16816(acc[m], a, pt0, pt1);
    }
  }

  // The warp's state into the CTA's per-group arrays (group = the warp): unnormalised accumulators against
  // run_max, as the CUDA-core loop leaves them.
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
      const int d = 16 * m + g;
      if (2 * t < G) {
        sm_acc[warp][2 * t][d] = acc[m][0];
        sm_acc[warp][2 * t][d + 8] = acc[m][2];
      }
      if (2 * t + 1 < G) {
        sm_acc[warp][2 * t + 1][d] = acc[m][1];
        sm_acc[warp][2 * t + 1][d + 8] = acc[m][3];
      }
    }
  }
};

}  // namespace nanovllm::cuda::attention_detail
