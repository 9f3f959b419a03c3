#pragma once
// What both prefill kernels (mma.sync and wgmma) share: a CTA's tile of query rows of one head (64 or 128), the
// paged K/V tile loads, the masked online softmax on accumulator fragments, and the output epilogue. Both kernels
// hold S and O in the same per-warp fragment layout (mma.sync m16n8's C fragments: s[n-tile][e], e = 0, 1 for
// row g and 2, 3 for row g + 8, columns 2t, 2t + 1), so everything after the MMAs is one code.
//
// Shared-memory tiles are rows of D bf16 in 16-byte chunks; a Layout maps (row, chunk) to an element offset.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_wgmma.cuh"
#include "backend/cuda/fp8_vec.cuh"
#include "backend/cuda/programmatic_launch.cuh"
#include "common/error.h"

namespace nanovllm::cuda::attention_detail {

constexpr int kPrefillKeys = 64;  // keys per K/V tile
constexpr int kWarpRows = 16;     // query rows per warp

// The mma.sync kernel's tiles: rows of D values, chunk index XOR-ed with the row's low 3 bits, so the 8 rows an
// ldmatrix phase reads fall into 8 different bank groups.
template <int D>
struct RowSwizzle {
  static __device__ __forceinline__ int at(int row, int chunk) { return row * D + ((chunk ^ (row & 7)) << 3); }
};

// The CTA's place: sequence, query head, first row and how many key tiles its rows can see (kRows rows a CTA),
// and where its output rows go.
struct PrefillTile {
  __nv_bfloat16* out = nullptr;  // the head's columns of the sequence's first output row
  size_t row_stride = 0;         // elements from one q / out row to the next
  int seq = 0;
  int head = 0;
  int kv_head = 0;
  int q_begin = 0;  // the sequence's first row in q / out
  int q_len = 0;
  int row0 = 0;      // the tile's first query row within the sequence
  int last_row = 0;  // the tile's last valid query row
  int seq_len = 0;
  int past = 0;  // position of the sequence's query row 0
  int num_kv_tiles = 0;
};

// The order the CTAs' tiles are handed out in. The hardware starts CTAs in grid order, and a CTA's work grows with
// its query tile's index (causal), so both orders start the longest runs first:
// - kPerSequence, grid (query heads, query tiles, sequences), last tile first: a sequence's CTAs run together and
//   share its K/V in the L2 cache. Right for long sequences, each of which fills the GPU many times over.
// - kAcrossSequences, grid (query heads, sequences, query tiles), last tile first: every sequence's longest runs
//   start before any shorter one and the grid ends on the shortest. Right for short sequences, whose CTAs fill
//   only part of the GPU each, so the last sequences' long runs would otherwise start last.
enum class PrefillTileOrder : int { kPerSequence, kAcrossSequences };

// Measured on an H100: across sequences took 16 x 1024 from 287-297 to 317 TFLOP/s (0.6B heads; d = 64 190 ->
// 217-221), but for 16 x 16k it cost 7% (every sequence's K/V read at once) and for chunks of 16k-token prompts
// 1.5% of the long-context workload's prefill, where the per-sequence order (heads before tiles) took 3.94 s to
// 3.88-3.91 s.
constexpr int kAcrossSequencesMaxQueryRows = 2048;

inline PrefillTileOrder prefill_tile_order(const PagedAttentionArgs& a) {
  return a.max_seqlen_q <= kAcrossSequencesMaxQueryRows ? PrefillTileOrder::kAcrossSequences
                                                        : PrefillTileOrder::kPerSequence;
}

// The CTA's tile under `order`. row0 >= q_len: this sequence has fewer query tiles and the CTA has nothing to do.
template <int D, int kRows>
__device__ __forceinline__ PrefillTile prefill_tile(const PagedAttentionArgs& a, PrefillTileOrder order) {
  PrefillTile t;
  t.row_stride = static_cast<size_t>(a.num_heads) * D;
  t.head = blockIdx.x;
  const bool across = order == PrefillTileOrder::kAcrossSequences;
  t.seq = across ? blockIdx.y : blockIdx.z;
  t.row0 = across ? (gridDim.z - 1 - blockIdx.z) * kRows : (gridDim.y - 1 - blockIdx.y) * kRows;
  t.q_begin = a.cu_seqlens_q[t.seq];
  t.q_len = a.cu_seqlens_q[t.seq + 1] - t.q_begin;
  if (t.row0 >= t.q_len) return t;
  t.out = a.out + static_cast<size_t>(t.q_begin) * t.row_stride + static_cast<size_t>(t.head) * D;
  t.seq_len = a.seq_lens_k[t.seq];
  t.kv_head = t.head / (a.num_heads / a.num_kv_heads);
  t.past = t.seq_len - t.q_len;
  t.last_row = min(t.row0 + kRows - 1, t.q_len - 1);
  const int last_pos = t.past + t.last_row;
  t.num_kv_tiles = last_pos >= 0 ? last_pos / kPrefillKeys + 1 : 0;
  return t;
}

// No key is visible (an empty sequence): the softmax of nothing is written as zeros.
template <int D, int kThreads>
__device__ __forceinline__ void write_zero_rows(const PrefillTile& t) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < (t.last_row - t.row0 + 1) * kChunks; i += kThreads) {
    *reinterpret_cast<uint4*>(t.out + static_cast<size_t>(t.row0 + i / kChunks) * t.row_stride + (i % kChunks) * 8) =
        make_uint4(0, 0, 0, 0);
  }
}

// The Q tile into shared memory; rows past q_len are zero-filled (computed, never written).
template <int D, int kRows, int kThreads, typename Layout>
__device__ __forceinline__ void load_q_tile(const PagedAttentionArgs& a, const PrefillTile& t, __nv_bfloat16* sm_q) {
  constexpr int kChunks = D / 8;
  const size_t row_stride = t.row_stride;
  const __nv_bfloat16* q = a.q + static_cast<size_t>(t.q_begin) * row_stride + static_cast<size_t>(t.head) * D;
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks;
    const int c = i % kChunks;
    const bool valid = t.row0 + r < t.q_len;
    const __nv_bfloat16* src = valid ? q + static_cast<size_t>(t.row0 + r) * row_stride + c * 8 : a.q;
    cp_async_16(smem_address(sm_q + Layout::at(r, c)), src, valid ? 16 : 0);
  }
}

// Starts the CTA: finds its tile and copies its Q rows (Layout) into sm_q. False when the CTA has nothing to attend:
// no query row of its sequence (a shorter sequence's grid slot), or rows that see no key, which it writes as zeros.
template <int D, int kRows, int kThreads, typename Layout>
__device__ __forceinline__ bool begin_prefill_tile(const PagedAttentionArgs& a, PrefillTileOrder order,
                                                   PrefillTile& tile, __nv_bfloat16* sm_q) {
  tile = prefill_tile<D, kRows>(a, order);
  if (tile.row0 >= tile.q_len) return false;
  if (tile.num_kv_tiles == 0) {
    write_zero_rows<D, kThreads>(tile);
    return false;
  }
  load_q_tile<D, kRows, kThreads, Layout>(a, tile, sm_q);
  return true;
}

// The positions in the sequence of this thread's two fragment rows (g and g + 8 of its warp's 16).
__device__ __forceinline__ void fragment_row_positions(const PrefillTile& t, int warp, int g, int (&pos)[2]) {
  pos[0] = t.past + t.row0 + warp * kWarpRows + g;
  pos[1] = pos[0] + 8;
}

__device__ __forceinline__ int log2_of_power_of_two(int x) { return 31 - __clz(x); }

// Copies key tile `kv_tile` of the CTA's KV head through the block table with cp.async. Keys past seq_len are
// zero-filled: never read from the cache, and 0 * garbage cannot turn into NaN. bf16: straight into the
// Layout's tiles. FP8: the codes, 16 to a copy, into plain [key][D] byte tiles (decode_fp8_tiles converts them).
// A thread always copies the same 16-byte column of every kThreads / copies-per-row'th key, so its column
// offsets are computed once and each copy costs a block-table load and one multiply-add.
template <int D, bool kFp8, int kThreads, typename Layout, int kKeys = kPrefillKeys>
class KvTileLoader {
 public:
  __device__ __forceinline__ KvTileLoader(const PagedAttentionArgs& a, const PrefillTile& t)
      : table_(a.block_tables + static_cast<size_t>(t.seq) * a.max_blocks_per_seq),
        k_column_(static_cast<const Elem*>(a.k_cache) + column_offset(t)),
        v_column_(static_cast<const Elem*>(a.v_cache) + column_offset(t)),
        k_cache_(static_cast<const Elem*>(a.k_cache)),
        v_cache_(static_cast<const Elem*>(a.v_cache)),
        slot_stride_(a.num_kv_heads * D),
        block_shift_(log2_of_power_of_two(a.block_size)),
        block_mask_(a.block_size - 1),
        seq_len_(t.seq_len) {}

  // dst_k / dst_v: bf16 tiles (kFp8 false) or code tiles (kFp8 true).
  __device__ __forceinline__ void load(int kv_tile, void* dst_k, void* dst_v) const {
    const int first_row = threadIdx.x / kCopiesPerRow;
    const int column = threadIdx.x % kCopiesPerRow;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int r = first_row + pass * kRowsPerPass;
      const int key = kv_tile * kKeys + r;
      const bool valid = key < seq_len_;
      const Elem* k_src = k_cache_;  // any valid address for a zero-filled copy
      const Elem* v_src = v_cache_;
      if (valid) {
        const int block = __ldg(table_ + (key >> block_shift_));
        // A slot index fits an int (2^31 slots would be terabytes of cache); the element offset may not.
        const size_t slot = static_cast<size_t>((block << block_shift_) | (key & block_mask_));
        k_src = k_column_ + slot * slot_stride_;
        v_src = v_column_ + slot * slot_stride_;
      }
      const int dst = kFp8 ? r * D + column * kCopyElems : Layout::at(r, column);
      cp_async_16(smem_address(static_cast<Elem*>(dst_k) + dst), k_src, valid ? 16 : 0);
      cp_async_16(smem_address(static_cast<Elem*>(dst_v) + dst), v_src, valid ? 16 : 0);
    }
  }

 private:
  using Elem = std::conditional_t<kFp8, uint8_t, __nv_bfloat16>;
  static constexpr int kCopyElems = 16 / sizeof(Elem);  // elements per 16-byte copy
  static constexpr int kCopiesPerRow = D / kCopyElems;
  static constexpr int kRowsPerPass = kThreads / kCopiesPerRow;
  static constexpr int kPasses = kKeys / kRowsPerPass;
  static_assert(kThreads % kCopiesPerRow == 0 && kKeys % kRowsPerPass == 0, "copies must tile the keys");

  static __device__ __forceinline__ size_t column_offset(const PrefillTile& t) {
    return static_cast<size_t>(t.kv_head) * D + (threadIdx.x % kCopiesPerRow) * kCopyElems;
  }

  const int* table_;
  const Elem* k_column_;  // this thread's column of the KV head in slot 0
  const Elem* v_column_;
  const Elem* k_cache_;
  const Elem* v_cache_;
  int slot_stride_;  // elements from one cache slot to the next
  int block_shift_;
  int block_mask_;
  int seq_len_;
};

// FP8: the loaded codes of K and V become the bf16 tiles the MMAs read (exact: every E4M3 value is a bf16).
template <int D, int kThreads, typename Layout>
__device__ __forceinline__ void decode_fp8_tiles(const uint8_t* k_codes, const uint8_t* v_codes, __nv_bfloat16* k_tile,
                                                 __nv_bfloat16* v_tile) {
  for (int i = threadIdx.x; i < 2 * kPrefillKeys * (D / 16); i += kThreads) {
    const bool is_v = i >= kPrefillKeys * (D / 16);
    const int item = is_v ? i - kPrefillKeys * (D / 16) : i;
    const int r = item / (D / 16);
    const int c = item % (D / 16);  // 16 codes = two 8-value chunks of the bf16 row
    const uint4 codes = *reinterpret_cast<const uint4*>((is_v ? v_codes : k_codes) + r * D + c * 16);
    __nv_bfloat16* tile = is_v ? v_tile : k_tile;
    *reinterpret_cast<uint4*>(tile + Layout::at(r, 2 * c)) = fp8x8_to_bf16x8(make_uint2(codes.x, codes.y));
    *reinterpret_cast<uint4*>(tile + Layout::at(r, 2 * c + 1)) = fp8x8_to_bf16x8(make_uint2(codes.z, codes.w));
  }
}

// The K/V tiles of a CTA in shared memory, kStages of bf16 (two for a bf16 cache: tile j + 1 copies in while
// tile j is computed; one for FP8, beside the codes of the next tile), starting at `tiles`:
// K [kStages][64 * D], V [kStages][64 * D], then FP8 codes K [64 * D], V [64 * D].
// kAsyncProxy: the tiles are read by wgmma, which needs a proxy fence after the generic-proxy writes.
template <int D, bool kFp8, int kThreads, typename Layout, bool kAsyncProxy>
class KvTiles {
 public:
  static constexpr int kStages = kFp8 ? 1 : 2;
  static constexpr int kTileElems = kPrefillKeys * D;
  static constexpr size_t kBytes = 2 * kStages * kTileElems * sizeof(__nv_bfloat16) + (kFp8 ? 2 * kTileElems : 0);

  __device__ __forceinline__ KvTiles(const PagedAttentionArgs& a, const PrefillTile& t, __nv_bfloat16* tiles)
      : loader_(a, t),
        k_(tiles),
        v_(tiles + kStages * kTileElems),
        k_codes_(reinterpret_cast<uint8_t*>(tiles + 2 * kStages * kTileElems)),
        v_codes_(k_codes_ + kTileElems),
        num_tiles_(t.num_kv_tiles) {}

  // Starts tile 0's copies, in one commit group with whatever the CTA copied before (its Q tile).
  __device__ __forceinline__ void start() const {
    load(0);
    cp_async_commit();
  }

  // Makes tile j readable by every thread (and the MMAs) and starts tile j + 1's copies. The caller ends
  // iteration j with a barrier after its last read of tile j.
  __device__ __forceinline__ void acquire(int j) const {
    if constexpr (kFp8) {
      cp_async_wait<0>();
      __syncthreads();  // tile j's codes (and Q) arrived; tile j - 1's bf16 tiles are no longer read
      decode_fp8_tiles<D, kThreads, Layout>(k_codes_, v_codes_, k_, v_);
      fence_async_proxy();
      __syncthreads();  // the bf16 tiles are written and the codes are free for tile j + 1
      if (j + 1 < num_tiles_) {
        load(j + 1);
        cp_async_commit();
      }
    } else {
      if (j + 1 < num_tiles_) {
        load(j + 1);  // its stage was released by the barrier that ended iteration j - 1
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      fence_async_proxy();
      __syncthreads();
    }
  }

  __device__ __forceinline__ const __nv_bfloat16* k(int j) const { return k_ + (j % kStages) * kTileElems; }
  __device__ __forceinline__ const __nv_bfloat16* v(int j) const { return v_ + (j % kStages) * kTileElems; }

 private:
  __device__ __forceinline__ void load(int j) const {
    if constexpr (kFp8) {
      loader_.load(j, k_codes_, v_codes_);
    } else {
      loader_.load(j, k_ + (j % kStages) * kTileElems, v_ + (j % kStages) * kTileElems);
    }
  }
  static __device__ __forceinline__ void fence_async_proxy() {
    if constexpr (kAsyncProxy) fence_shared_for_wgmma();
  }

  KvTileLoader<D, kFp8, kThreads, Layout> loader_;
  __nv_bfloat16* k_;
  __nv_bfloat16* v_;
  uint8_t* k_codes_;
  uint8_t* v_codes_;
  int num_tiles_;
};

// The running softmax state of this thread's two rows (g and g + 8 of its warp's 16).
struct SoftmaxRows {
  float max[2] = {-INFINITY, -INFINITY};
  float sum[2] = {0.f, 0.f};  // this thread's columns only; summed over the quad at the end
};

// 2^x on the special-function unit, subnormal results flushed to zero (weights below 2^-126 of the row's
// largest are nothing to the softmax); exp2f adds a range fix-up around the same instruction.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// O's rows times their softmax corrections. Late in a long row its maximum rarely grows: the warp skips the
// rescale when none of its rows' did.
template <int D>
__device__ __forceinline__ void rescale_rows(float (&o)[D / 8][4], const float (&correction)[2]) {
  if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= correction[0];
      o[dt][1] *= correction[0];
      o[dt][2] *= correction[1];
      o[dt][3] *= correction[1];
    }
  }
}

// One online-softmax step over key tile key0: scores masked (kMask) after each row's position and past the
// sequence end, O rescaled where a row's maximum grew, S replaced by the unnormalised weights
// P = 2^(S * score_scale - max). The running maximum is kept unscaled (score_scale > 0 keeps the order), so
// each weight is one fused multiply-add and one 2^x. row_pos: the positions of rows g and g + 8. A row's 64
// scores live in one quad.
// kDeferRescale: O is being accumulated by an MMA still in flight, so its rescale is left to the caller
// (rescale_rows, once that MMA is done): the factors are returned in `correction`.
// score_scale: per row (g, g + 8). kWeightLog2: the weights come out as 2^kWeightLog2 P (for FP8 weights, which
// then use the e4m3 range; the row sums carry the same factor, so the normalised output does not change).
template <int D, bool kMask, bool kDeferRescale = false, int kN = kPrefillKeys / 8, int kWeightLog2 = 0>
__device__ __forceinline__ void softmax_tile(float (&s)[kN][4], float (&o)[D / 8][4], SoftmaxRows& st, int key0,
                                             const int (&row_pos)[2], int seq_len, const float (&score_scale)[2],
                                             float (&correction)[2]) {
  if constexpr (kMask) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int nt = 0; nt < kN; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t + (e & 1);
        if (key > row_pos[e >> 1] || key >= seq_len) s[nt][e] = -INFINITY;
      }
    }
  }
  float ref_scaled[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float tile_max = st.max[rr];
#pragma unroll
    for (int nt = 0; nt < kN; ++nt) tile_max = fmaxf(tile_max, fmaxf(s[nt][2 * rr], s[nt][2 * rr + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    // A row with no visible key yet keeps reference 0: its weights are 2^-inf = 0, never NaN.
    ref_scaled[rr] = tile_max == -INFINITY ? 0.f : tile_max * score_scale[rr];
    correction[rr] = st.max[rr] == tile_max ? 1.f : exp2_approx(st.max[rr] * score_scale[rr] - ref_scaled[rr]);
    st.max[rr] = tile_max;
    st.sum[rr] *= correction[rr];
  }
  if constexpr (!kDeferRescale) rescale_rows<D>(o, correction);
#pragma unroll
  for (int nt = 0; nt < kN; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = exp2_approx(fmaf(s[nt][e], score_scale[e >> 1], kWeightLog2 - ref_scaled[e >> 1]));
      st.sum[e >> 1] += s[nt][e];
    }
  }
}

// The step for key tile key0, masked only where the tile crosses the diagonal of the rows from first_pos on
// or the sequence's end (each variant is its own code: a predicated mask costs every tile).
template <int D, bool kDeferRescale = false, int kN = kPrefillKeys / 8, int kWeightLog2 = 0>
__device__ __forceinline__ void softmax_step(float (&s)[kN][4], float (&o)[D / 8][4], SoftmaxRows& st, int key0,
                                             int first_pos, const int (&row_pos)[2], int seq_len,
                                             const float (&score_scale)[2], float (&correction)[2]) {
  if (key0 + 8 * kN - 1 > first_pos || key0 + 8 * kN > seq_len) {
    softmax_tile<D, true, kDeferRescale, kN, kWeightLog2>(s, o, st, key0, row_pos, seq_len, score_scale, correction);
  } else {
    softmax_tile<D, false, kDeferRescale, kN, kWeightLog2>(s, o, st, key0, row_pos, seq_len, score_scale, correction);
  }
}

// One score scale for both rows.
template <int D, bool kDeferRescale = false, int kN = kPrefillKeys / 8>
__device__ __forceinline__ void softmax_step(float (&s)[kN][4], float (&o)[D / 8][4], SoftmaxRows& st, int key0,
                                             int first_pos, const int (&row_pos)[2], int seq_len, float score_scale,
                                             float (&correction)[2]) {
  const float per_row[2] = {score_scale, score_scale};
  softmax_step<D, kDeferRescale, kN>(s, o, st, key0, first_pos, row_pos, seq_len, per_row, correction);
}

template <int D, int kN = kPrefillKeys / 8>
__device__ __forceinline__ void softmax_step(float (&s)[kN][4], float (&o)[D / 8][4], SoftmaxRows& st, int key0,
                                             int first_pos, const int (&row_pos)[2], int seq_len, float score_scale) {
  float correction[2];
  softmax_step<D, false>(s, o, st, key0, first_pos, row_pos, seq_len, score_scale, correction);
}

// The weights of keys kk * 16 .. + 15 as a bf16 A fragment: the S accumulators of n-tiles 2kk and 2kk + 1.
template <int kN>
__device__ __forceinline__ void p_fragment(const float (&s)[kN][4], int kk, uint32_t (&p)[4]) {
  p[0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
  p[1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
  p[2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  p[3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// Normalises O, stages the bf16 rows in this warp's own 16 rows of `stage` (a tile no other warp reads any
// more) and stores them 16 bytes at a time.
// kFirstWarp: the warp that owns the tile's first 16 rows (0 unless warps before it do other work).
template <int D, typename Layout, int kFirstWarp = 0>
__device__ __forceinline__ void store_output(const PrefillTile& t, float (&o)[D / 8][4], const SoftmaxRows& st,
                                             float v_scale, __nv_bfloat16* stage) {
  constexpr int kChunks = D / 8;
  const int warp = static_cast<int>(threadIdx.x / 32) - kFirstWarp;
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;
  const int tq = lane & 3;
  __syncwarp();  // the warp's earlier reads of those rows are ordered before the lanes' stores below
  float inv[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float sum = st.sum[rr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inv[rr] = sum > 0.f ? v_scale / sum : 0.f;
  }
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int r = warp * kWarpRows + g + 8 * rr;
      *reinterpret_cast<uint32_t*>(stage + Layout::at(r, dt) + 2 * tq) =
          pack_bf16x2(o[dt][2 * rr] * inv[rr], o[dt][2 * rr + 1] * inv[rr]);
    }
  }
  __syncwarp();
  const int warp_row0 = t.row0 + warp * kWarpRows;
  for (int i = lane; i < kWarpRows * kChunks; i += 32) {
    const int r = i / kChunks;
    const int c = i % kChunks;
    const int q_row = warp_row0 + r;
    if (q_row < t.q_len) {
      *reinterpret_cast<uint4*>(t.out + static_cast<size_t>(q_row) * t.row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(stage + Layout::at(warp * kWarpRows + r, c));
    }
  }
}

// Launches a prefill kernel of kThreads threads over query tiles of kRows rows, query heads and sequences, in the
// grid of prefill_tile_order(a), with `smem` bytes of dynamic shared memory (allowed on this device first).
// `extra`: the kernel's parameters after (args, order).
template <int kRows, int kThreads, typename Kernel, typename... Extra>
void launch_prefill_grid(const char* name, Kernel kernel, size_t smem, const PagedAttentionArgs& a, cudaStream_t stream,
                         const Extra&... extra) {
  allow_dynamic_smem(kernel, smem, "paged_attention_prefill");
  const int q_tiles = (a.max_seqlen_q + kRows - 1) / kRows;
  const PrefillTileOrder order = prefill_tile_order(a);
  const dim3 grid = order == PrefillTileOrder::kAcrossSequences ? dim3(a.num_heads, a.num_seqs, q_tiles)
                                                                : dim3(a.num_heads, q_tiles, a.num_seqs);
  if (grid.y > 65535 || grid.z > 65535)
    throw EngineError(std::string(name) + ": " + std::to_string(a.num_seqs) + " sequences of up to " +
                      std::to_string(a.max_seqlen_q) + " query rows exceed the grid limit 65535");
  launch_programmatic_split(SharedSplit::kKernelsOwn, name, kernel, grid, dim3(kThreads), smem, stream, a, order,
                            extra...);
}

}  // namespace nanovllm::cuda::attention_detail
