// Decode attention (one query row per sequence) over the paged cache: split-KV flash-decoding with balanced
// ranges (attention_decode_plan.cuh).
//
// Grid (num_kv_heads, num_ranges), one wave of resident CTAs. CTA (KV head, r) of 128 threads attends range r of
// the step's keys, laid end to end over the sequences: a piece of one sequence or pieces of several, each for
// every query head of the GQA group, so each K/V byte is read from memory once per step. Inside the CTA, D/8
// consecutive lanes share a key (eight values each: 16 bytes of bf16 or 8 of FP8; D/16 lanes of 16 FP8 codes
// for groups of one or two heads); the CTA's "token groups" each walk their own keys with an fp32 online
// softmax, and merge through shared memory at the end of the piece. A sequence held by one range is written
// directly (bf16); otherwise each piece writes a normalised partial (acc/l) plus (max, sum) to the workspace,
// and the last CTA of the (sequence, KV head) to finish combines them (merge_if_last): no second launch, whose
// fixed cost was ~5 us a layer in a decode step.
//
// Two key loops share all of that: the CUDA-core one above (attend_piece), and for head_dim 128 a tensor-core one
// (attend_piece_mma, attention_decode_mma.cuh) whose arithmetic does not grow with the group; which runs is
// decode_kernel_for's choice.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <string>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_decode_mma.cuh"
#include "backend/cuda/attention_decode_plan.cuh"
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/programmatic_launch.cuh"

namespace nanovllm::cuda {
namespace {

using namespace attention_detail;

constexpr int kDecodeThreads = 128;
constexpr int kDecodeWarps = kDecodeThreads / 32;

// One piece of a CTA's range, in shared memory: what the code after the key loop needs (kept in registers
// through the loop, it would cost registers and occupancy).
struct Piece {
  int seq;
  int count;       // ranges holding this sequence's keys: 1 = write the output directly
  int first_slot;  // workspace slot of the sequence's first piece (slots are consecutive)
  int slot;        // this piece's slot
};

// seq_prefix[i] = positions (keys and gaps, seq_positions) of the sequences before sequence i,
// seq_prefix[num_seqs] = all of them: a block-wide scan of seq_lens_k, tile by tile, by every thread of every CTA
// (a few hundred ints from L2). Also the longest sequence's keys.
__device__ void scan_lengths(const PagedAttentionArgs& a, long long* seq_prefix, int& longest) {
  __shared__ long long warp_sums[kDecodeWarps];
  __shared__ int warp_longest[kDecodeWarps];
  int my_longest = 0;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n = a.num_seqs;
  long long carry = 0;  // positions of the tiles before
  for (int tile = 0; tile < n; tile += kDecodeThreads) {
    const int i = tile + tid;
    const int keys = i < n ? max(a.seq_lens_k[i], 0) : 0;
    my_longest = max(my_longest, keys);
    const long long len = seq_positions(i, keys);
    long long inclusive = len;  // within the warp
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += other;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    long long before = carry, tile_keys = 0;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      if (w < warp) before += warp_sums[w];
      tile_keys += warp_sums[w];
    }
    if (i < n) seq_prefix[i] = before + inclusive - len;
    carry += tile_keys;
    __syncthreads();  // warp_sums is written again by the next tile
  }
  my_longest = __reduce_max_sync(0xffffffffu, my_longest);
  if (lane == 0) warp_longest[warp] = my_longest;
  __syncthreads();
  if (tid == 0) {
    seq_prefix[n] = carry;
    int m = 0;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) m = max(m, warp_longest[w]);
    longest = m;
  }
  __syncthreads();
}

// The first sequence holding keys of `range` (or num_seqs): a binary search, since a sequence's last range never
// decreases from one sequence to the next.
__device__ __forceinline__ int first_seq_of_range(const long long* seq_prefix, int n, int range,
                                                  const DecodeRanges& ranges) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    const SeqKeys keys = seq_keys(mid, seq_prefix[mid], seq_prefix[mid + 1]);
    if (seq_ranges(keys.prefix, keys.len, ranges).last < range) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// A piece to attend: sequence seq's keys of the range, and the ranges holding the sequence.
struct PieceSpan {
  int seq;
  KeySpan keys;
  SeqRanges held;
  int earlier_keys;  // the sequence's keys from earlier steps: all but its query rows' own
  int row;           // its query row (decode rows have one)

  // What the code after the key loop needs of it, for range `range`.
  __device__ __forceinline__ Piece to_piece(int range) const {
    return {seq, held.last - held.first + 1, seq + held.first, seq + range};
  }
};

// The range's first piece from sequence `seq` on (seq = num_seqs when none is left): padding sequences (no query
// row) and sequences with no key in the range are skipped; a sequence without any key is a piece (it writes
// zeros).
__device__ __forceinline__ PieceSpan find_piece(const PagedAttentionArgs& a, const long long* seq_prefix, int seq,
                                                int range, const DecodeRanges& ranges) {
  for (; seq < a.num_seqs; ++seq) {
    const SeqKeys all = seq_keys(seq, seq_prefix[seq], seq_prefix[seq + 1]);
    const SeqRanges held = seq_ranges(all.prefix, all.len, ranges);
    if (held.first > range) break;
    const KeySpan keys = range_keys(all.prefix, all.len, range, ranges);
    const int rows_end = a.cu_seqlens_q[seq + 1];
    const int rows = rows_end - a.cu_seqlens_q[seq];  // 0: a padding sequence
    if (rows > 0 && (keys.begin < keys.end || all.len == 0)) return {seq, keys, held, all.len - rows, rows_end - 1};
  }
  return {a.num_seqs, {}, {}, 0, 0};
}

// Output dims d4..d4+3 of query head `head` in row `row`: o x scale, as bf16.
template <int D>
__device__ __forceinline__ void write_output_quad(const PagedAttentionArgs& a, int row, int head, int d4,
                                                  const float (&o)[4], float scale) {
  __nv_bfloat16* dst = a.out + static_cast<size_t>(row) * a.num_heads * D + head * D + d4;
  uint2 packed;
  packed.x = pack_bf16x2(o[0] * scale, o[1] * scale);
  packed.y = pack_bf16x2(o[2] * scale, o[3] * scale);
  *reinterpret_cast<uint2*>(dst) = packed;
}

// A merged weighted sum o over its total weight (zero where no piece had weight).
template <int D>
__device__ __forceinline__ void write_merged_quad(const PagedAttentionArgs& a, int row, int head, int d4,
                                                  const float (&o)[4], float total) {
  write_output_quad<D>(a, row, head, d4, o, total > 0.f ? 1.f / total : 0.f);
}

// The spread merges' last step: each item's kParts shares (part p of item i at p * kItems + i) added and written.
template <int D, int kItems, int kParts>
__device__ __forceinline__ void write_summed_parts(const PagedAttentionArgs& a, int row, int head0, int group_size,
                                                   const float4* part_out, const float* part_total) {
  constexpr int kQuads = D / 4;
  for (int item = threadIdx.x; item < kItems; item += kDecodeThreads) {
    if (item / kQuads >= group_size) continue;
    float total = 0.f;
    float o[4] = {0.f, 0.f, 0.f, 0.f};
    // In order, so the sum does not depend on timing; not unrolled: that spilled registers of the key loop.
#pragma unroll 1
    for (int part = 0; part < kParts; ++part) {
      const float4 p = part_out[part * kItems + item];
      total += part_total[part * kItems + item];
      o[0] += p.x;
      o[1] += p.y;
      o[2] += p.z;
      o[3] += p.w;
    }
    write_merged_quad<D>(a, row, head0 + item / kQuads, (item % kQuads) * 4, o, total);
  }
}

// Whether this CTA's piece is the last of its (sequence, KV head) to arrive; called by every thread once the
// CTA's partial is written. Plain loads after it see the other CTAs' partials: their fence and atomic come before
// this CTA's atomic and fence (CUDA's memory model).
__device__ __forceinline__ bool arrives_last(const PagedAttentionArgs& a, const Piece& piece, int* counters_end) {
  __shared__ bool is_last;
  __threadfence();  // this CTA's partial is visible on every SM before the CTA counts itself in
  __syncthreads();
  if (threadIdx.x == 0) {
    // One counter per (sequence, KV head), at the workspace's end, counted backwards.
    int* counter = counters_end - 1 - (static_cast<size_t>(piece.seq) * a.num_kv_heads + blockIdx.x);
    is_last = atomicAdd(counter, 1) == piece.count - 1;
    if (is_last) *counter = 0;  // every piece has arrived: nothing else touches it in this launch
  }
  __syncthreads();
  if (!is_last) return false;
  __threadfence();
  return true;
}

// Called by every thread of each CTA holding a piece of a (sequence, KV head) cut by range boundaries, once its
// partial is written. The CTA that arrives last (an atomic counter in the workspace, left at zero for the next
// launch) weights each piece's normalised partial by sum * 2^(max - global max) and writes the bf16 output rows
// of the GQA group. Where the group has fewer than 128 items of 4 output dims, each head's global max is one
// warp's strided reduction and each item's pieces are split among several threads whose loads are independent,
// so a merge of a hundred pieces costs a few rounds of L2 latency, not a hundred; with an item per thread, each
// thread walks its item's pieces itself.
template <int D, int G>
__device__ __forceinline__ void merge_if_last(const PagedAttentionArgs& a, const Piece& piece, const float* ws_acc,
                                              const float* ws_ml, int* counters_end) {
  __shared__ float head_max[kDecodeMaxGroup];
  __shared__ float4 part_out[kDecodeThreads];
  __shared__ float part_total[kDecodeThreads];
  if (!arrives_last(a, piece, counters_end)) return;
  const int kv_head = blockIdx.x, seq = piece.seq;
  const int row = a.cu_seqlens_q[seq + 1] - 1;
  const int group_size = a.num_heads / a.num_kv_heads;
  const int head0 = kv_head * group_size;
  const int count = piece.count, first_slot = piece.first_slot;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float2* ml = reinterpret_cast<const float2*>(ws_ml);  // (max, sum) per slot and head
  const auto slot_of = [&](int s, int h) { return static_cast<size_t>(first_slot + s) * a.num_heads + head0 + h; };
  // Work items of G heads (a smaller real group leaves the extra heads' items idle).
  constexpr int kQuads = D / 4;  // 4 output dims per work item
  constexpr int kItems = G * kQuads;
  constexpr int kParts = kItems < kDecodeThreads ? kDecodeThreads / kItems : 1;  // threads per item
  if constexpr (kParts == 1) {
    // Groups of 4+ heads have an item per thread: each thread finds its head's max itself (measured: the spread
    // merge below, inlined, made the G = 4 kernel's key loop 6% slower). The weighted sum is written out in both
    // branches: a shared helper measured 10-15% slower merges (1 x 4k keys 22 -> 26 us).
    for (int item = tid; item < kItems; item += kDecodeThreads) {
      const int h = item / kQuads, d4 = (item % kQuads) * 4;
      if (h >= group_size) continue;
      float global_max = -INFINITY;
#pragma unroll 4
      for (int s = 0; s < count; ++s)
        if (ml[slot_of(s, h)].y > 0.f) global_max = fmaxf(global_max, ml[slot_of(s, h)].x);
      float total = 0.f;
      float o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
      for (int s = 0; s < count; ++s) {
        const float2 split_ml = ml[slot_of(s, h)];
        if (!(split_ml.y > 0.f)) continue;
        const float w = split_ml.y * exp2f(split_ml.x - global_max);
        total += w;
        const float4 acc = *reinterpret_cast<const float4*>(ws_acc + slot_of(s, h) * D + d4);
        o[0] = fmaf(w, acc.x, o[0]);
        o[1] = fmaf(w, acc.y, o[1]);
        o[2] = fmaf(w, acc.z, o[2]);
        o[3] = fmaf(w, acc.w, o[3]);
      }
      write_merged_quad<D>(a, row, head0 + h, d4, o, total);
    }
  } else {
    for (int h = warp; h < group_size; h += kDecodeWarps) {
      float m = -INFINITY;
      for (int s = lane; s < count; s += 32) {
        const float2 v = ml[slot_of(s, h)];
        if (v.y > 0.f) m = fmaxf(m, v.x);
      }
      m = warp_max(m);
      if (lane == 0) head_max[h] = m;
    }
    __syncthreads();

    for (int work = tid; work < kItems * kParts; work += kDecodeThreads) {
      const int item = work % kItems, part = work / kItems;
      const int h = item / kQuads, d4 = (item % kQuads) * 4;
      if (h >= group_size) continue;
      const float global_max = head_max[h];
      float total = 0.f;
      float o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
      for (int s = part; s < count; s += kParts) {
        const float2 split_ml = ml[slot_of(s, h)];
        const float4 acc = *reinterpret_cast<const float4*>(ws_acc + slot_of(s, h) * D + d4);
        if (!(split_ml.y > 0.f)) continue;  // a piece without weight (its partial is zero)
        const float w = split_ml.y * exp2f(split_ml.x - global_max);
        total += w;
        o[0] = fmaf(w, acc.x, o[0]);
        o[1] = fmaf(w, acc.y, o[1]);
        o[2] = fmaf(w, acc.z, o[2]);
        o[3] = fmaf(w, acc.w, o[3]);
      }
      part_out[work] = make_float4(o[0], o[1], o[2], o[3]);
      part_total[work] = total;
    }
    __syncthreads();
    write_summed_parts<D, kItems, kParts>(a, row, head0, group_size, part_out, part_total);
  }
}

// The tensor-core loop's merge, in shared memory its stages leave free: each piece's (max, sum) of every head is
// loaded at once (one round of L2 latency instead of one a piece), each head's global max and each piece's weight
// are found in shared memory, and the weighted sum over the pieces' partials is split among 128 / (G x 32)
// threads an item, eight loads in flight each. The CUDA-core kernels keep merge_if_last: its registers are
// theirs too, and some of them are at their launch bounds.
constexpr int kStagedMergeMaxPieces = 128;  // a sequence spans at most kDecodeMaxPieces + 1 ranges
static_assert(kDecodeMaxPieces + 1 <= kStagedMergeMaxPieces, "the staged merge keeps every piece's weights");

template <int G>
constexpr size_t staged_merge_bytes() {
  return kDecodeThreads * (sizeof(float4) + sizeof(float)) + 2 * kStagedMergeMaxPieces * G * sizeof(float) +
         G * sizeof(float);
}

template <int D, int G>
__device__ __forceinline__ void merge_staged_if_last(const PagedAttentionArgs& a, const Piece& piece,
                                                     const float* ws_acc, const float* ws_ml, int* counters_end,
                                                     unsigned char* scratch) {
  if (!arrives_last(a, piece, counters_end)) return;
  constexpr int kQuads = D / 4;  // 4 output dims per work item
  constexpr int kItems = G * kQuads;
  constexpr int kParts = kItems < kDecodeThreads ? kDecodeThreads / kItems : 1;  // threads per item
  auto* part_out = reinterpret_cast<float4*>(scratch);                           // [kDecodeThreads]
  auto* part_total = reinterpret_cast<float*>(part_out + kDecodeThreads);        // [kDecodeThreads]
  float* piece_max = part_total + kDecodeThreads;                                // [count][G]
  float* weight = piece_max + kStagedMergeMaxPieces * G;                         // [count][G]: sum, then weight
  float* head_max = weight + kStagedMergeMaxPieces * G;                          // [G]
  const int group_size = a.num_heads / a.num_kv_heads;
  const int head0 = blockIdx.x * group_size;
  const int count = piece.count, first_slot = piece.first_slot;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const auto slot_of = [&](int s, int h) { return static_cast<size_t>(first_slot + s) * a.num_heads + head0 + h; };
  const float2* ml = reinterpret_cast<const float2*>(ws_ml);  // (max, sum) per slot and head
  for (int i = tid; i < count * G; i += kDecodeThreads) {
    const int s = i / G, h = i % G;
    const float2 v = h < group_size ? ml[slot_of(s, h)] : make_float2(0.f, 0.f);
    piece_max[i] = v.y > 0.f ? v.x : -INFINITY;  // a piece without weight (its partial is zero) sets no max
    weight[i] = v.y;
  }
  __syncthreads();
  for (int h = warp; h < group_size; h += kDecodeWarps) {
    float m = -INFINITY;
    for (int s = lane; s < count; s += 32) m = fmaxf(m, piece_max[s * G + h]);
    m = warp_max(m);
    if (lane == 0) head_max[h] = m;
  }
  __syncthreads();
  for (int i = tid; i < count * G; i += kDecodeThreads) {
    const int h = i % G;
    weight[i] = h < group_size && weight[i] > 0.f ? weight[i] * exp2f(piece_max[i] - head_max[h]) : 0.f;
  }
  __syncthreads();
  const int row = a.cu_seqlens_q[piece.seq + 1] - 1;
  for (int work = tid; work < kItems * kParts; work += kDecodeThreads) {
    const int item = work % kItems, part = work / kItems;
    const int h = item / kQuads, d4 = (item % kQuads) * 4;
    if (h >= group_size) continue;
    float total = 0.f;
    float o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
    for (int s = part; s < count; s += kParts) {
      const float w = weight[s * G + h];
      const float4 acc = *reinterpret_cast<const float4*>(ws_acc + slot_of(s, h) * D + d4);
      if (!(w > 0.f)) continue;
      total += w;
      o[0] = fmaf(w, acc.x, o[0]);
      o[1] = fmaf(w, acc.y, o[1]);
      o[2] = fmaf(w, acc.z, o[2]);
      o[3] = fmaf(w, acc.w, o[3]);
    }
    if constexpr (kParts == 1) {
      write_merged_quad<D>(a, row, head0 + h, d4, o, total);
    } else {
      part_out[work] = make_float4(o[0], o[1], o[2], o[3]);
      part_total[work] = total;
    }
  }
  if constexpr (kParts > 1) {
    __syncthreads();
    write_summed_parts<D, kItems, kParts>(a, row, head0, group_size, part_out, part_total);
  }
}

// After the key loop: the CTA's token groups (kGroupCount of them, each with its running max, sum and unnormalised
// accumulators in shared memory) are merged, and a sequence in one range writes its output; otherwise the piece
// writes a partial for the merge. Read from shared memory rather than kept through the key loop (registers, see
// merge_if_last).
// kStagedMerge: merge_staged_if_last in merge_scratch (shared memory free by then: the tensor-core loop's stages),
// else merge_if_last.
template <int D, int G, int kGroupCount, bool kFp8, bool kStagedMerge = false>
__device__ __forceinline__ void finish_piece(const PagedAttentionArgs& a, const Piece& piece,
                                             const float (*sm_acc)[G][D], const float (*sm_max)[G],
                                             const float (*sm_sum)[G], float* ws_acc, float* ws_ml, int* counters_end,
                                             unsigned char* merge_scratch = nullptr) {
  const int row = a.cu_seqlens_q[piece.seq + 1] - 1;
  const int group_size = a.num_heads / a.num_kv_heads;
  const int head0 = blockIdx.x * group_size;
  const int tid = threadIdx.x;
  const bool single = piece.count == 1;
  constexpr int kQuads = D / 4;  // 4 output dims per work item
  for (int item = tid; item < group_size * kQuads; item += kDecodeThreads) {
    const int h = item / kQuads;
    const int d4 = (item % kQuads) * 4;
    float cta_max = -INFINITY;
#pragma unroll
    for (int g = 0; g < kGroupCount; ++g) cta_max = fmaxf(cta_max, sm_max[g][h]);
    float sum = 0.f;
    float o[4] = {0.f, 0.f, 0.f, 0.f};
    if (cta_max != -INFINITY) {
#pragma unroll
      for (int g = 0; g < kGroupCount; ++g) {
        const float w = exp2f(sm_max[g][h] - cta_max);  // 0 for groups that saw no key
        sum += sm_sum[g][h] * w;
        const float4 part = *reinterpret_cast<const float4*>(&sm_acc[g][h][d4]);
        o[0] = fmaf(w, part.x, o[0]);
        o[1] = fmaf(w, part.y, o[1]);
        o[2] = fmaf(w, part.z, o[2]);
        o[3] = fmaf(w, part.w, o[3]);
      }
    }
    const float inv = sum > 0.f ? (kFp8 ? a.v_scale : 1.f) / sum : 0.f;  // partials carry v_scale too
    if (single) {
      write_output_quad<D>(a, row, head0 + h, d4, o, inv);
    } else {
      const size_t slot = static_cast<size_t>(piece.slot) * a.num_heads + head0 + h;
      *reinterpret_cast<float4*>(ws_acc + slot * D + d4) = make_float4(o[0] * inv, o[1] * inv, o[2] * inv, o[3] * inv);
      if (d4 == 0) {
        ws_ml[2 * slot] = cta_max;
        ws_ml[2 * slot + 1] = sum;
      }
    }
  }
  if (single) return;
  if constexpr (kStagedMerge) {
    merge_staged_if_last<D, G>(a, piece, ws_acc, ws_ml, counters_end, merge_scratch);
  } else {
    merge_if_last<D, G>(a, piece, ws_acc, ws_ml, counters_end);
  }
}

// One piece: keys [kv_begin, kv_end) of sequence `seq` (the rest of it in `piece`). D: head_dim; G: query heads
// per KV head (every size 1..8 has its own instantiation; the code also tolerates a real group smaller than G:
// the extra heads run on zero queries and are never written). kFp8: the cache holds E4M3 codes; k_scale is
// folded into the queries and v_scale into the output.
template <int D, int G, bool kFp8>
__device__ __forceinline__ void attend_piece(const PagedAttentionArgs& a, int seq, int kv_begin, int kv_end,
                                             const Piece& piece, float* ws_acc, float* ws_ml, int* counters_end) {
  // Values per lane: 8 (one 16-byte load of bf16). FP8 with small groups: 16 codes (one 16-byte load), so half
  // the lanes share a key and each key costs fewer shuffles; the per-lane queries and accumulators double, which
  // larger groups cannot afford in registers (or in sm_acc), so they load 8 codes (8 bytes) a lane.
  constexpr int kVec = kFp8 && G <= 2 ? 16 : 8;
  using Vec = CacheVec<kFp8, kVec>;
  constexpr int kLanes = D / kVec;                  // lanes per key
  constexpr int kGroups = kDecodeThreads / kLanes;  // token groups per CTA
  // Keys per group per iteration (loads in flight): 8-byte FP8 loads take twice the keys to keep as many bytes
  // in flight; fewer wherever a tile of them would not divide a chunk.
  constexpr int kBaseUnroll = (G > 4 ? 2 : 4) * (kFp8 && kVec == 8 ? 2 : 1);
  constexpr int kUnroll = kGroups * kBaseUnroll <= kDecodeChunkAlign ? kBaseUnroll : kDecodeChunkAlign / kGroups;
  constexpr int kTileKeys = kGroups * kUnroll;
  static_assert(kDecodeChunkAlign % kTileKeys == 0, "chunks must be whole iterations");
  static_assert(16 % kUnroll == 0, "a group's keys of one iteration must fit in the smallest block (16)");

  __shared__ __align__(16) float sm_acc[kGroups][G][D];
  __shared__ float sm_max[kGroups][G];
  __shared__ float sm_sum[kGroups][G];
  const int kv_head = blockIdx.x;
  const int row = a.cu_seqlens_q[seq + 1] - 1;
  const int group_size = a.num_heads / a.num_kv_heads;
  const int head0 = kv_head * group_size;
  const int tid = threadIdx.x;

  const int lane_in_group = tid % kLanes;
  const int group = tid / kLanes;

  // Queries, pre-scaled so that scores are in log2 units (exp2 instead of exp).
  const float q_scale = a.scale * kLog2e * (kFp8 ? a.k_scale : 1.0f);
  float q[G][kVec];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    if (h < group_size) {
#pragma unroll
      for (int part = 0; part < kVec / 8; ++part) {
        const uint4 raw = load_16b(a.q + static_cast<size_t>(row) * a.num_heads * D + (head0 + h) * D +
                                   lane_in_group * kVec + part * 8);
        bf16x8_to_float(raw, reinterpret_cast<float(&)[8]>(q[h][part * 8]));
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) q[h][i] *= q_scale;
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) q[h][i] = 0.f;
    }
  }
  // FP8 cache: the products run on half pairs (codes become halves at one instruction a pair, floats at three).
  // Each head's queries are scaled by a power of two that puts their largest magnitude in [8, 16), so a half
  // summing kVec / 2 products with codes (|code| <= 448) stays below 65504; the power goes back into the fp32
  // score, exactly. Half keeps 11 bits, more than the bf16 queries carry.
  __half2 q_half[kFp8 ? G : 1][kVec / 2];
  float q_unscale[G];
  if constexpr (kFp8) {
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float largest = 0.f;
#pragma unroll
      for (int i = 0; i < kVec; ++i) largest = fmaxf(largest, fabsf(q[h][i]));
#pragma unroll
      for (int offset = kLanes / 2; offset >= 1; offset /= 2)
        largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
      int power = 0;
      if (largest > 0.f && largest <= FLT_MAX) {
        frexpf(largest, &power);  // largest = m * 2^power, m in [0.5, 1)
        power = max(power - 4, -100);
      }
      q_unscale[h] = ldexpf(1.f, power);
      const float down = ldexpf(1.f, -power);
#pragma unroll
      for (int i = 0; i < kVec / 2; ++i) q_half[h][i] = __floats2half2_rn(q[h][2 * i] * down, q[h][2 * i + 1] * down);
    }
  }

  float run_max[G], run_sum[G], acc[G][kVec];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    run_max[h] = -INFINITY;
    run_sum[h] = 0.f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[h][i] = 0.f;
  }

  const size_t slot_stride = static_cast<size_t>(a.num_kv_heads) * D;  // elements between consecutive slots
  const size_t head_offset = static_cast<size_t>(kv_head) * D + lane_in_group * kVec;
  const int* table = a.block_tables + static_cast<size_t>(seq) * a.max_blocks_per_seq;
  const int block_shift = __ffs(a.block_size) - 1;
  const int block_mask = a.block_size - 1;

  using Raw = typename Vec::Raw;
  // Every load of an iteration is issued before the first use. FP8: the next iteration's codes are loaded
  // while this one is computed on (profiled, its warps waited on memory for ~30% of their cycles at 4 CTAs per
  // SM; with the prefetch at 3 CTAs per SM 256 x 1k ran 17% faster). bf16 groups of 3+ measured slower with
  // it: the registers cost them a CTA per SM.
  constexpr bool kPrefetch = kFp8;
  auto issue_loads = [&](int tile, Raw(&k_raw)[kUnroll], Raw(&v_raw)[kUnroll], bool(&valid)[kUnroll]) {
    // The group's keys start at a multiple of kUnroll (chunks and tiles are), so they share one cache block.
    const int key0 = tile + group * kUnroll;
    const int block = key0 < kv_end ? __ldg(table + (key0 >> block_shift)) : 0;
    const size_t offset0 =
        (static_cast<size_t>(block) * a.block_size + (key0 & block_mask)) * slot_stride + head_offset;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      valid[u] = key0 + u < kv_end;
      if (valid[u]) {
        k_raw[u] = Vec::load(a.k_cache, offset0 + u * slot_stride);
        v_raw[u] = Vec::load(a.v_cache, offset0 + u * slot_stride);
      } else {
        k_raw[u] = Vec::zero();
        v_raw[u] = Vec::zero();
      }
    }
  };
  Raw k_raw[kUnroll], v_raw[kUnroll];
  bool valid[kUnroll];
  if constexpr (kPrefetch) issue_loads(kv_begin, k_raw, v_raw, valid);
  for (int tile = kv_begin; tile < kv_end; tile += kTileKeys) {
    Raw k_next[kPrefetch ? kUnroll : 1], v_next[kPrefetch ? kUnroll : 1];
    bool valid_next[kPrefetch ? kUnroll : 1];
    if constexpr (kPrefetch) {
      issue_loads(tile + kTileKeys, k_next, v_next, valid_next);
    } else {
      issue_loads(tile, k_raw, v_raw, valid);
    }

    // Scores: partial dot products over this lane's 8 dims, summed over the key's lanes.
    float score[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if constexpr (kFp8) {
        __half2 k[kVec / 2];
        Vec::to_half2(k_raw[u], k);
#pragma unroll
        for (int h = 0; h < G; ++h) {
          __half2 s = __hmul2(q_half[h][0], k[0]);
#pragma unroll
          for (int i = 1; i < kVec / 2; ++i) s = __hfma2(q_half[h][i], k[i], s);
          const float2 pair = __half22float2(s);
          score[u][h] = (pair.x + pair.y) * q_unscale[h];
        }
      } else {
        float k[kVec];
        Vec::to_float(k_raw[u], k);
#pragma unroll
        for (int h = 0; h < G; ++h) {
          float s = 0.f;
#pragma unroll
          for (int i = 0; i < kVec; ++i) s = fmaf(q[h][i], k[i], s);
          score[u][h] = s;
        }
      }
    }
#pragma unroll
    for (int offset = kLanes / 2; offset >= 1; offset /= 2) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int h = 0; h < G; ++h) score[u][h] += __shfl_xor_sync(0xffffffffu, score[u][h], offset);
      }
    }

    // Online softmax, one rescale per iteration. FP8: the iteration's p * v are summed in half pairs (p <= 1,
    // |code| <= 448, at most 8 keys: below 65504), then added to the fp32 accumulators.
    float v[kFp8 ? 1 : kUnroll][kVec];
    __half2 v_half[kFp8 ? kUnroll : 1][kVec / 2];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if constexpr (kFp8) {
        Vec::to_half2(v_raw[u], v_half[u]);
      } else {
        Vec::to_float(v_raw[u], v[u]);
      }
    }
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float tile_max = run_max[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (valid[u]) tile_max = fmaxf(tile_max, score[u][h]);
      // tile_max is -inf only while this group has seen no key; keep the arithmetic NaN-free then.
      const float ref = tile_max == -INFINITY ? 0.f : tile_max;
      const float correction = exp2f(run_max[h] - ref);
      run_max[h] = tile_max;
      run_sum[h] *= correction;
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[h][i] *= correction;
      if constexpr (kFp8) {
        __half2 pv[kVec / 2];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const float p = valid[u] ? exp2f(score[u][h] - ref) : 0.f;
          run_sum[h] += p;
          const __half2 p2 = __float2half2_rn(p);
#pragma unroll
          for (int i = 0; i < kVec / 2; ++i)
            pv[i] = u == 0 ? __hmul2(p2, v_half[u][i]) : __hfma2(p2, v_half[u][i], pv[i]);
        }
#pragma unroll
        for (int i = 0; i < kVec / 2; ++i) {
          const float2 pair = __half22float2(pv[i]);
          acc[h][2 * i] += pair.x;
          acc[h][2 * i + 1] += pair.y;
        }
      } else {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const float p = valid[u] ? exp2f(score[u][h] - ref) : 0.f;
          run_sum[h] += p;
#pragma unroll
          for (int i = 0; i < kVec; ++i) acc[h][i] = fmaf(p, v[u][i], acc[h][i]);
        }
      }
    }
    if constexpr (kPrefetch) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        k_raw[u] = k_next[u];
        v_raw[u] = v_next[u];
        valid[u] = valid_next[u];
      }
    }
  }

  // Merge the token groups of the CTA.
#pragma unroll
  for (int h = 0; h < G; ++h) {
    float4* dst = reinterpret_cast<float4*>(&sm_acc[group][h][lane_in_group * kVec]);
#pragma unroll
    for (int i = 0; i < kVec / 4; ++i)
      dst[i] = make_float4(acc[h][4 * i], acc[h][4 * i + 1], acc[h][4 * i + 2], acc[h][4 * i + 3]);
    if (lane_in_group == 0) {
      sm_max[group][h] = run_max[h];
      sm_sum[group][h] = run_sum[h];
    }
  }
  __syncthreads();

  finish_piece<D, G, kGroups, kFp8>(a, piece, sm_acc, sm_max, sm_sum, ws_acc, ws_ml, counters_end);
}

// The tensor-core loop's stages: each warp keeps kMmaStages - 1 chunks (8 KiB of bf16, 4 of codes) in flight;
// its four warps' rings (96 / 48 KiB) fit two (three) CTAs an SM, one (two) within the decode step's split. The
// ring is stage-major (stage s of warp w at (s x warps + w) x stage bytes), so the last stage of every warp is one
// region: a piece's per-warp results and its merge go there while the next piece's first chunks land in the others.
constexpr int kMmaStages = 3;
constexpr int mma_min_ctas(bool fp8) { return fp8 ? 3 : 2; }
constexpr int kMmaRingOffset = ((kDecodeMaxSeqs + 1) * 8 + 127) / 128 * 128;  // after the largest prefix array
// One stage of every warp.
template <bool kFp8>
constexpr int mma_stage_region_bytes() {
  return kDecodeWarps * MmaChunk<kFp8>::kStageBytes;
}
constexpr int mma_smem_bytes(bool fp8) {
  return kMmaRingOffset + kMmaStages * (fp8 ? mma_stage_region_bytes<true>() : mma_stage_region_bytes<false>());
}

// One warp's copies of one piece's chunks into its stages: it takes every fourth chunk of 16 keys of the piece, and
// the block-table entry of the next chunk to copy is loaded one chunk ahead, so the copies do not wait on it. Every
// issue is a commit group (empty past the piece's end), so the key loop's waits count chunks.
template <bool kFp8>
struct MmaChunkCopier {
  // Keys between a warp's consecutive chunks.
  static constexpr int kStride = kDecodeWarps * kMmaChunkKeys;
  int next_copy = 0;   // the first key of the next chunk to copy
  int next_block = 0;  // the block holding it (a chunk of 16 aligned keys lies in one block: blocks hold 2^k >= 16)
  int end = 0;         // the piece's end
  int copied = 0;      // chunks issued so far

  __device__ __forceinline__ void begin(const PagedAttentionArgs& a, int seq, int kv_begin, int kv_end, int warp) {
    next_copy = kv_begin + warp * kMmaChunkKeys;
    end = kv_end;
    copied = 0;
    next_block = next_copy < end ? __ldg(table(a, seq) + (next_copy >> block_shift(a))) : 0;
  }

  // Whether the next chunk reads only keys below `limit`.
  __device__ __forceinline__ bool next_reads_below(int limit) const {
    return next_copy >= end || min(next_copy + kMmaChunkKeys, end) <= limit;
  }

  // stages: this warp's first stage (mma_warp_stages).
  __device__ __forceinline__ void issue_next(const PagedAttentionArgs& a, int seq, uint32_t stages, int lane) {
    if (next_copy < end) {
      const size_t slot_stride = static_cast<size_t>(a.num_kv_heads) * kMmaDecodeDim;
      const size_t base =
          (static_cast<size_t>(next_block) * a.block_size + (next_copy & (a.block_size - 1))) * slot_stride +
          static_cast<size_t>(blockIdx.x) * kMmaDecodeDim;
      stage_decode_chunk<kFp8>(stages + (copied % kMmaStages) * mma_stage_region_bytes<kFp8>(), a.k_cache, a.v_cache,
                               base, slot_stride, next_copy, end, lane);
      next_copy += kStride;
      if (next_copy < end) next_block = __ldg(table(a, seq) + (next_copy >> block_shift(a)));
    }
    cp_async_commit();
    ++copied;
  }

  // Issues the chunks up to kMmaStages - 1 ahead that read only keys below `limit`.
  __device__ __forceinline__ void issue_first(const PagedAttentionArgs& a, int seq, uint32_t stages, int lane,
                                              int limit = INT_MAX) {
    while (copied < kMmaStages - 1 && next_reads_below(limit)) issue_next(a, seq, stages, lane);
  }

  static __device__ __forceinline__ const int* table(const PagedAttentionArgs& a, int seq) {
    return a.block_tables + static_cast<size_t>(seq) * a.max_blocks_per_seq;
  }
  static __device__ __forceinline__ int block_shift(const PagedAttentionArgs& a) { return __ffs(a.block_size) - 1; }
};

// This warp's stage 0 in the ring (stage s is mma_stage_region_bytes() x s further).
template <bool kFp8>
__device__ __forceinline__ uint32_t mma_warp_stages(unsigned char* ring) {
  return smem_address(ring) + (threadIdx.x / 32) * MmaChunk<kFp8>::kStageBytes;
}

// The queries of piece `p`'s row for this CTA's KV head.
template <bool kFp8>
__device__ __forceinline__ MmaQueries fetch_piece_queries(const PagedAttentionArgs& a, const PieceSpan& p) {
  const int group_size = a.num_heads / a.num_kv_heads;
  return fetch_mma_queries<kFp8>(
      a.q + static_cast<size_t>(p.row) * a.num_heads * kMmaDecodeDim + blockIdx.x * group_size * kMmaDecodeDim,
      group_size, threadIdx.x % 32);
}

// Range `range` on tensor cores (head_dim 128; attention_decode_mma.cuh), from its first piece `next` on. Each
// warp keeps kMmaStages - 1 chunks in flight in its own stages (cp.async, waited per lane and published to the warp
// by __syncwarp: no CTA-wide barrier inside the key loop). A piece's start is a chain of loads (the block table,
// the first chunks, the queries) and its end a merge through shared memory and, for a cut sequence, a partial, a
// fence and an arrival count: so the next piece's chain is issued before the current piece ends, and the first
// piece's table entries and chunks of keys from earlier steps before the wait for the previous kernel (only the
// step's new keys and queries are being written by it).
template <int G, bool kFp8>
__device__ __forceinline__ void attend_range_mma(const PagedAttentionArgs& a, PieceSpan next,
                                                 const long long* seq_prefix, int range, const DecodeRanges& ranges,
                                                 Piece& piece, float* ws_acc, float* ws_ml, int* counters_end,
                                                 unsigned char* ring) {
  constexpr int D = kMmaDecodeDim;
  constexpr int kStride = MmaChunkCopier<kFp8>::kStride;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n = a.num_seqs;
  const uint32_t stages = mma_warp_stages<kFp8>(ring);
  // The last stage of every warp: the pieces' per-warp results, then their merge.
  unsigned char* results = ring + (kMmaStages - 1) * mma_stage_region_bytes<kFp8>();
  static_assert(sizeof(float) * kDecodeWarps * G * D <= mma_stage_region_bytes<kFp8>(),
                "the per-warp accumulators must fit in the last stage of the warps");
  static_assert(staged_merge_bytes<G>() <= mma_stage_region_bytes<kFp8>(), "the staged merge must fit there too");
  auto* sm_acc = reinterpret_cast<float(*)[G][D]>(results);
  __shared__ float sm_max[kDecodeWarps][G];
  __shared__ float sm_sum[kDecodeWarps][G];

  MmaChunkCopier<kFp8> copies;
  if (next.seq < n) {
    copies.begin(a, next.seq, next.keys.begin, next.keys.end, warp);
    copies.issue_first(a, next.seq, stages, lane, next.earlier_keys);
  }
  wait_for_previous_grid();
  if (next.seq >= n) return;
  MmaQueries queries = fetch_piece_queries<kFp8>(a, next);
  do {
    const PieceSpan cur = next;
    if (threadIdx.x == 0) {
      piece = cur.to_piece(range);
    }
    copies.issue_first(a, cur.seq, stages, lane);
    DecodeMmaWarp<G, kFp8> state;
    state.load_queries(queries, a.scale, a.k_scale);
    int done = 0;
    for (int key0 = cur.keys.begin + warp * kMmaChunkKeys; key0 < cur.keys.end; key0 += kStride, ++done) {
      copies.issue_next(a, cur.seq, stages, lane);  // kMmaStages - 1 chunks ahead of this one
      cp_async_wait<kMmaStages - 1>();              // this lane's copies of chunk `done` have landed
      __syncwarp();                                 // and every lane's
      state.attend_chunk(stages + (done % kMmaStages) * mma_stage_region_bytes<kFp8>(), key0, cur.keys.end, lane);
      __syncwarp();  // the stage is read before a later copy reuses it
    }
    // Every chunk of this piece has landed (the groups after the last were empty). This warp's stages before the
    // last are free: the next piece's first chunks and queries go out now.
    next = find_piece(a, seq_prefix, cur.seq + 1, range, ranges);
    if (next.seq < n) {
      copies.begin(a, next.seq, next.keys.begin, next.keys.end, warp);
      copies.issue_first(a, next.seq, stages, lane);
      queries = fetch_piece_queries<kFp8>(a, next);
    }
    __syncthreads();  // every warp is done with the last stage and `piece` is written
    state.store(sm_acc, sm_max, sm_sum, warp, lane);
    __syncthreads();
    finish_piece<D, G, kDecodeWarps, kFp8, true>(a, piece, sm_acc, sm_max, sm_sum, ws_acc, ws_ml, counters_end,
                                                 results);
    __syncthreads();  // the last stage and `piece` are written again by the next piece
  } while (next.seq < n);
  cp_async_wait<0>();
}

// Resident CTAs per SM the kernel is compiled for: the most whose register budget the key loop fits without
// spilling (left alone, the loop over pieces around it keeps a few more values live and costs a CTA per SM;
// G = 1 held to 8 spilled 16 bytes and streamed 9% slower than at 7).
constexpr int decode_min_ctas(int group, bool fp8) {
  constexpr int kBf16[kDecodeMaxGroup] = {7, 6, 4, 4, 3, 3, 2, 2};
  constexpr int kFp8Codes[kDecodeMaxGroup] = {4, 3, 3, 3, 3, 2, 2, 2};
  return fp8 ? kFp8Codes[group - 1] : kBf16[group - 1];
}

// The CTA of (KV head blockIdx.x, range blockIdx.y): the range's pieces one after the other.
// kMma: the tensor-core key loop (D = 128), whose stages follow the prefix array at kMmaRingOffset.
template <int D, int G, bool kFp8, bool kMma>
__global__ void __launch_bounds__(kDecodeThreads, kMma ? mma_min_ctas(kFp8) : decode_min_ctas(G, kFp8))
    decode_split_kernel(PagedAttentionArgs a, float* ws_acc, float* ws_ml, int* counters_end) {
  extern __shared__ __align__(128) long long seq_prefix[];  // [num_seqs + 1]; then the MMA stages
  __shared__ Piece piece;
  __shared__ int longest;
  // The next kernel may start now: the launch asks for the step's L1 / shared split (programmatic_launch.h), so
  // kernels let in beside these CTAs keep their L1. (Under a split made for two tensor-core CTAs an SM, the GEMV
  // let in beside them had a few KiB of L1: Qwen3-8B batch 16 with 1k contexts 9.39 ms a token, 7.38 without the
  // early start; results.md R79, R86.)
  allow_next_grid();
  // The lengths are step metadata, written by copies before the step, never by a kernel that lets its
  // dependents start early: reading them now overlaps the previous kernel's end.
  scan_lengths(a, seq_prefix, longest);
  const int n = a.num_seqs;
  const int range = blockIdx.y;
  const DecodeRanges ranges = make_ranges(seq_prefix[n], gridDim.y, longest);
  if (range >= ranges.used) return;
  PieceSpan next = find_piece(a, seq_prefix, first_seq_of_range(seq_prefix, n, range, ranges), range, ranges);
  if constexpr (kMma) {
    static_assert(D == kMmaDecodeDim, "the tensor-core key loop takes head_dim 128");
    attend_range_mma<G, kFp8>(a, next, seq_prefix, range, ranges, piece, ws_acc, ws_ml, counters_end,
                              reinterpret_cast<unsigned char*>(seq_prefix) + kMmaRingOffset);
  } else {
    wait_for_previous_grid();
    while (next.seq < n) {
      if (threadIdx.x == 0) {
        piece = next.to_piece(range);
      }
      __syncthreads();
      attend_piece<D, G, kFp8>(a, next.seq, next.keys.begin, next.keys.end, piece, ws_acc, ws_ml, counters_end);
      next = find_piece(a, seq_prefix, piece.seq + 1, range, ranges);  // from shared memory: fewer live registers
      __syncthreads();  // shared memory is written again by the next piece
    }
  }
}

// Dynamic shared memory of decode_split_kernel: the prefix array, or for the tensor-core loop the largest prefix
// array and the stages.
template <bool kFp8, bool kMma>
size_t decode_dynamic_smem(int num_seqs) {
  return kMma ? mma_smem_bytes(kFp8) : (static_cast<size_t>(num_seqs) + 1) * sizeof(long long);
}

// Resident CTAs per SM of decode_split_kernel<D, G, kFp8, kMma> with the largest prefix array (the CUDA-core
// kernel's own arrays and the prefix stay within the 48 KiB a kernel gets without asking; the tensor-core one's
// stages are allowed by launch_split before it asks). Occupancy depends on the kernel and the GPU's kind only, so
// it is asked once per instantiation: the cache is a static of this template, keyed on the kernel's parameters
// (every instantiation has the same function type, so a cache keyed on that type would hand the first kernel's
// answer to all of them).
template <int D, int G, bool kFp8, bool kMma>
int decode_ctas_per_sm() {
  static const int per_sm = [] {
    const auto kernel = decode_split_kernel<D, G, kFp8, kMma>;
    const size_t dynamic_smem = decode_dynamic_smem<kFp8, kMma>(kDecodeMaxSeqs);
    int blocks = 0;
    NANOVLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kDecodeThreads, dynamic_smem));
    // Within the step's shared split (launch_programmatic asks for it), which the occupancy query does not know:
    // the one wave of ranges must be resident at once.
    if (step_shared_carveout_percent() >= 0) {
      cudaFuncAttributes attributes{};
      NANOVLLM_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
      int device = 0, reserved = 0;
      NANOVLLM_CUDA_CHECK(cudaGetDevice(&device));
      NANOVLLM_CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
      const size_t per_cta = dynamic_smem + attributes.sharedSizeBytes + static_cast<size_t>(reserved);
      blocks = std::min(blocks, static_cast<int>(static_cast<size_t>(kStepSharedMemoryBytes) / per_cta));
    }
    return std::clamp(blocks, 1, kDecodeMaxCtasPerSm);
  }();
  return per_sm;
}

template <int D, int G, bool kFp8, bool kMma>
void launch_split(const PagedAttentionArgs& a, void* workspace, size_t workspace_bytes, int sm_count,
                  cudaStream_t stream) {
  if constexpr (kMma)
    allow_dynamic_smem(decode_split_kernel<D, G, kFp8, kMma>, decode_dynamic_smem<kFp8, kMma>(a.num_seqs),
                       "paged_attention_decode");
  const int num_ranges = decode_num_ranges(decode_ctas_per_sm<D, G, kFp8, kMma>(), sm_count, a.num_kv_heads);
  const size_t slots = decode_slot_bound(a.num_seqs, num_ranges) * a.num_heads;
  const size_t need = slots * (D + 2) * sizeof(float) + decode_workspace_counter_bytes(a.num_seqs, a.num_kv_heads);
  if (workspace == nullptr || workspace_bytes < need)
    throw EngineError("paged_attention_decode: workspace of " + std::to_string(workspace_bytes) +
                      " bytes is smaller than the " + std::to_string(need) + " this launch needs (" +
                      std::to_string(num_ranges) + " ranges); size it with decode_workspace_bytes");
  if ((reinterpret_cast<uintptr_t>(workspace) & 15u) != 0)
    throw EngineError("paged_attention_decode: workspace must be 16-byte aligned");
  if (workspace_bytes % sizeof(int) != 0)
    throw EngineError("paged_attention_decode: workspace bytes must be a multiple of 4");
  float* ws_acc = static_cast<float*>(workspace);
  float* ws_ml = ws_acc + slots * D;
  int* counters_end = reinterpret_cast<int*>(static_cast<char*>(workspace) + workspace_bytes);
  launch_programmatic("decode_split_kernel", decode_split_kernel<D, G, kFp8, kMma>, dim3(a.num_kv_heads, num_ranges),
                      dim3(kDecodeThreads), decode_dynamic_smem<kFp8, kMma>(a.num_seqs), stream, a, ws_acc, ws_ml,
                      counters_end);
}

template <int D, int G>
void launch_decode(const PagedAttentionArgs& a, void* workspace, size_t workspace_bytes, int sm_count,
                   DecodeKernel kernel, cudaStream_t stream) {
  if constexpr (D == kMmaDecodeDim) {
    if (decode_kernel_for(a, kernel) == DecodeKernel::kTensorCores) {
      if (a.fp8_cache) return launch_split<D, G, true, true>(a, workspace, workspace_bytes, sm_count, stream);
      return launch_split<D, G, false, true>(a, workspace, workspace_bytes, sm_count, stream);
    }
  }
  if (a.fp8_cache) return launch_split<D, G, true, false>(a, workspace, workspace_bytes, sm_count, stream);
  launch_split<D, G, false, false>(a, workspace, workspace_bytes, sm_count, stream);
}

template <int D>
void dispatch_group(const PagedAttentionArgs& a, void* workspace, size_t workspace_bytes, int sm_count,
                    DecodeKernel kernel, cudaStream_t stream) {
  switch (a.num_heads / a.num_kv_heads) {
    case 1:
      return launch_decode<D, 1>(a, workspace, workspace_bytes, sm_count, kernel, stream);
    case 2:
      return launch_decode<D, 2>(a, workspace, workspace_bytes, sm_count, kernel, stream);
    case 3:
      return launch_decode<D, 3>(a, workspace, workspace_bytes, sm_count, kernel, stream);
    case 4:
      return launch_decode<D, 4>(a, workspace, workspace_bytes, sm_count, kernel, stream);
    case 5:
      return launch_decode<D, 5>(a, workspace, workspace_bytes, sm_count, kernel, stream);
    case 6:
      return launch_decode<D, 6>(a, workspace, workspace_bytes, sm_count, kernel, stream);
    case 7:
      return launch_decode<D, 7>(a, workspace, workspace_bytes, sm_count, kernel, stream);
    default:
      return launch_decode<D, 8>(a, workspace, workspace_bytes, sm_count, kernel, stream);
  }
}

}  // namespace

size_t decode_workspace_bytes(int max_num_seqs, int num_heads, int head_dim, int sm_count) {
  // Counters for every (sequence, KV head) of any launch within the bounds (num_kv_heads <= num_heads).
  return decode_workspace_floats(max_num_seqs, num_heads, head_dim, sm_count) * sizeof(float) +
         decode_workspace_counter_bytes(max_num_seqs, num_heads);
}

size_t decode_workspace_counter_bytes(int num_seqs, int num_kv_heads) {
  return static_cast<size_t>(std::max(num_seqs, 0)) * std::max(num_kv_heads, 0) * sizeof(int);
}

int decode_max_num_seqs() { return kDecodeMaxSeqs; }

std::string unsupported_attention_heads(int num_heads, int num_kv_heads, int head_dim) {
  if (head_dim != 64 && head_dim != 128)
    return "head_dim " + std::to_string(head_dim) + " (the attention kernels take 64 or 128)";
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0)
    return std::to_string(num_heads) + " query heads over " + std::to_string(num_kv_heads) + " KV heads";
  if (num_heads / num_kv_heads > kDecodeMaxGroup)
    return std::to_string(num_heads / num_kv_heads) + " query heads per KV head (decode attention takes at most " +
           std::to_string(kDecodeMaxGroup) + ")";
  return "";
}

DecodeKernel decode_kernel_for(const PagedAttentionArgs& args, DecodeKernel requested) {
  const bool mma_fits = args.head_dim == kMmaDecodeDim;
  switch (requested) {
    case DecodeKernel::kTensorCores:
      return mma_fits ? DecodeKernel::kTensorCores : DecodeKernel::kCudaCores;
    case DecodeKernel::kCudaCores:
      return DecodeKernel::kCudaCores;
    case DecodeKernel::kAuto:
      break;
  }
  return mma_fits ? DecodeKernel::kTensorCores : DecodeKernel::kCudaCores;
}

void paged_attention_decode(const PagedAttentionArgs& args, void* workspace, size_t workspace_bytes, int sm_count,
                            cudaStream_t stream, DecodeKernel kernel) {
  validate_args(args, "paged_attention_decode");
  const int group_size = args.num_heads / args.num_kv_heads;
  if (group_size > kDecodeMaxGroup)
    throw EngineError("paged_attention_decode: " + std::to_string(group_size) + " query heads per KV head; at most " +
                      std::to_string(kDecodeMaxGroup) + " are supported");
  if (args.num_seqs == 0) return;
  if (args.num_seqs > kDecodeMaxSeqs)
    throw EngineError("paged_attention_decode: " + std::to_string(args.num_seqs) + " sequences; at most " +
                      std::to_string(kDecodeMaxSeqs) + " are supported");
  if (sm_count <= 0)
    throw EngineError("paged_attention_decode: sm_count " + std::to_string(sm_count) + " must be at least 1");
  if (args.head_dim == 64) {
    dispatch_group<64>(args, workspace, workspace_bytes, sm_count, kernel, stream);
  } else {
    dispatch_group<128>(args, workspace, workspace_bytes, sm_count, kernel, stream);
  }
}

}  // namespace nanovllm::cuda
