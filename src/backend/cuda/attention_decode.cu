// Decode attention (one query row per sequence) over the paged cache: split-KV flash-decoding.
//
// Grid (num_kv_heads, num_seqs, num_splits). One CTA of 128 threads owns one KV head of one sequence and one
// chunk of its keys, and computes every query head of that GQA group, so each K/V byte is read from memory
// once per step. Inside the CTA, D/8 consecutive lanes share a key (eight values each: 16 bytes of bf16 or 8 of
// FP8; D/16 lanes of 16 FP8 codes for groups of one or two heads); the CTA's "token groups" each walk their own
// keys with an fp32 online softmax, and merge through shared memory at the end. With one split the CTA writes the bf16
// output; otherwise it writes a normalised partial (acc/l) plus (max, sum) to the workspace, and the last CTA of the
// (sequence, KV head) to finish combines the splits (merge_if_last): no second launch, whose fixed cost was ~5 us a
// layer in a decode step.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_decode_plan.cuh"
#include "backend/cuda/programmatic_launch.cuh"

namespace nanovllm::cuda {
namespace {

using namespace attention_detail;

constexpr int kDecodeThreads = 128;

// Keys per split of one sequence. A decode graph plans its splits for max_model_len keys, so most of a
// shorter sequence's splits would be empty: when the launch has few (sequence, KV head) pairs (`spread`,
// fewer than half the CTA target, e.g. 8B shapes under tensor parallelism), each sequence's own keys are
// spread evenly over the splits instead, so that every CTA has work. Whole CTA iterations, at least
// kDecodeChunkAlign keys (a short sequence's few keys then take several CTAs, each with a shorter chain of
// dependent loads), never more than the plan's chunk (which covers max_seqlen_k >= seq_len keys). With
// enough pairs the extra merge work costs more than it gains (measured on an H200 while the merge was a second
// kernel: 0.6B shapes, bucket 144, 8 KV heads: workload 6.47 s spread against 6.29-6.34 s not), so the plan's
// chunk is kept.
__device__ __forceinline__ int seq_chunk(bool spread, int seq_len, int num_splits, int plan_chunk) {
  if (!spread) return plan_chunk;
  const int even = (max(seq_len, 1) + num_splits - 1) / num_splits;
  const int aligned = (even + kDecodeChunkAlign - 1) / kDecodeChunkAlign * kDecodeChunkAlign;
  return min(max(aligned, kDecodeChunkAlign), plan_chunk);
}

// Called by every thread of each split CTA of a (sequence, KV head) that holds keys (split 0 always counts, so
// that even a sequence without keys gets its row written) once its partial is written. The CTA that arrives
// last (an atomic counter in the workspace, left at zero for the next launch) weights each split's
// normalised partial by sum * 2^(max - global max) and writes the bf16 output rows of the GQA group.
// Everything is recomputed from the launch arguments: values kept live across the split's key loop cost it
// registers, and occupancy (125 -> 166 registers a thread at 4 query heads per KV head when they were).
template <int D>
__device__ __forceinline__ void merge_if_last(const PagedAttentionArgs& a, int num_splits, int plan_chunk, bool spread,
                                              const float* ws_acc, const float* ws_ml, int* counters_end) {
  __shared__ bool is_last;
  __threadfence();  // this CTA's partial is visible on every SM before the CTA counts itself in
  __syncthreads();
  if (threadIdx.x == 0) {
    // One counter per (sequence, KV head), at the workspace's end, counted backwards. Recomputed here rather
    // than kept live through the key loop (registers, see above).
    const int seq_len = a.seq_lens_k[blockIdx.y];
    const int chunk = seq_chunk(spread, seq_len, num_splits, plan_chunk);
    const int arrivals = max(1, min(num_splits, (seq_len + chunk - 1) / chunk));
    int* counter = counters_end - 1 - (static_cast<size_t>(blockIdx.y) * a.num_kv_heads + blockIdx.x);
    is_last = atomicAdd(counter, 1) == arrivals - 1;
    if (is_last) *counter = 0;  // every split has arrived: nothing else touches it in this launch
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const int kv_head = blockIdx.x, seq = blockIdx.y;
  const int row = a.cu_seqlens_q[seq + 1] - 1;
  const int seq_len = a.seq_lens_k[seq];
  const int chunk = seq_chunk(spread, seq_len, num_splits, plan_chunk);
  const int group_size = a.num_heads / a.num_kv_heads;
  const int head0 = kv_head * group_size;
  const size_t group_base = (static_cast<size_t>(seq) * a.num_heads + head0) * num_splits;  // split 0 of head0
  // Only the splits below `used` hold partials (those past the end left without one). Plain loads see the other
  // CTAs' partials: their fence and atomic come before this CTA's atomic and fence (CUDA's memory model).
  const int used = min(num_splits, max(0, (seq_len + chunk - 1) / chunk));
  constexpr int kQuads = D / 4;  // 4 output dims per work item
  for (int item = threadIdx.x; item < group_size * kQuads; item += blockDim.x) {
    const int h = item / kQuads;
    const int d4 = (item % kQuads) * 4;
    const size_t base = group_base + static_cast<size_t>(h) * num_splits;
    const float2* ml = reinterpret_cast<const float2*>(ws_ml) + base;  // (max, sum) per split
    float global_max = -INFINITY;
    for (int s = 0; s < used; ++s)
      if (ml[s].y > 0.f) global_max = fmaxf(global_max, ml[s].x);
    float total = 0.f;
    float o[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < used; ++s) {
      const float2 split_ml = ml[s];
      if (!(split_ml.y > 0.f)) continue;
      const float w = split_ml.y * exp2f(split_ml.x - global_max);
      total += w;
      const float4 part = *reinterpret_cast<const float4*>(ws_acc + (base + s) * D + d4);
      o[0] = fmaf(w, part.x, o[0]);
      o[1] = fmaf(w, part.y, o[1]);
      o[2] = fmaf(w, part.z, o[2]);
      o[3] = fmaf(w, part.w, o[3]);
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
    __nv_bfloat16* dst = a.out + static_cast<size_t>(row) * a.num_heads * D + (head0 + h) * D + d4;
    uint2 packed;
    packed.x = pack_bf16x2(o[0] * inv, o[1] * inv);
    packed.y = pack_bf16x2(o[2] * inv, o[3] * inv);
    *reinterpret_cast<uint2*>(dst) = packed;
  }
}

// Split CTA. D: head_dim; G: query heads per KV head (every size 1..8 has its own instantiation; the code also
// tolerates a real group smaller than G: the extra heads run on zero queries and are never written). kFp8: the
// cache holds E4M3 codes; k_scale is folded into the queries and v_scale into the output.
template <int D, int G, bool kFp8>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_split_kernel(PagedAttentionArgs a, int num_splits, int plan_chunk, bool spread, float* ws_acc, float* ws_ml,
                        int* counters_end) {
  start_after_previous_grid();
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

  const int kv_head = blockIdx.x;  // fastest: a sequence's KV heads run together and read whole cache slots
  const int seq = blockIdx.y;
  const int split = blockIdx.z;
  const int q_begin = a.cu_seqlens_q[seq];
  const int q_len = a.cu_seqlens_q[seq + 1] - q_begin;
  if (q_len <= 0) return;  // padding sequence: no row to write
  const int row = q_begin + q_len - 1;
  const int seq_len = a.seq_lens_k[seq];
  const int chunk = seq_chunk(spread, seq_len, num_splits, plan_chunk);
  const int kv_begin = split * chunk;
  const int kv_end = min(kv_begin + chunk, seq_len);
  const int group_size = a.num_heads / a.num_kv_heads;
  const int head0 = kv_head * group_size;
  const int tid = threadIdx.x;
  const size_t ws_base = (static_cast<size_t>(seq) * a.num_heads + head0) * num_splits + split;

  if (num_splits > 1 && kv_begin >= kv_end) {  // past this sequence's end
    // A graph's grid is planned for its longest sequence: such splits leave at once, uncounted, except split 0
    // of a sequence without keys, which marks itself empty (sum 0) for the merge.
    if (split > 0) return;
    if (tid < group_size) {
      ws_ml[2 * (ws_base + static_cast<size_t>(tid) * num_splits)] = -INFINITY;
      ws_ml[2 * (ws_base + static_cast<size_t>(tid) * num_splits) + 1] = 0.f;
    }
    merge_if_last<D>(a, num_splits, plan_chunk, spread, ws_acc, ws_ml, counters_end);
    return;
  }

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

  for (int tile = kv_begin; tile < kv_end; tile += kTileKeys) {
    // Issue every load of the iteration before the first use.
    typename Vec::Raw k_raw[kUnroll], v_raw[kUnroll];
    bool valid[kUnroll];
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

    // Scores: partial dot products over this lane's 8 dims, summed over the key's lanes.
    float score[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
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
#pragma unroll
    for (int offset = kLanes / 2; offset >= 1; offset /= 2) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int h = 0; h < G; ++h) score[u][h] += __shfl_xor_sync(0xffffffffu, score[u][h], offset);
      }
    }

    // Online softmax, one rescale per iteration.
    float v[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) Vec::to_float(v_raw[u], v[u]);
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
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float p = valid[u] ? exp2f(score[u][h] - ref) : 0.f;
        run_sum[h] += p;
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[h][i] = fmaf(p, v[u][i], acc[h][i]);
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

  constexpr int kQuads = D / 4;  // 4 output dims per work item
  for (int item = tid; item < group_size * kQuads; item += kDecodeThreads) {
    const int h = item / kQuads;
    const int d4 = (item % kQuads) * 4;
    float cta_max = -INFINITY;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) cta_max = fmaxf(cta_max, sm_max[g][h]);
    float sum = 0.f;
    float o[4] = {0.f, 0.f, 0.f, 0.f};
    if (cta_max != -INFINITY) {
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
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
    if (num_splits == 1) {
      __nv_bfloat16* dst = a.out + static_cast<size_t>(row) * a.num_heads * D + (head0 + h) * D + d4;
      uint2 packed;
      packed.x = pack_bf16x2(o[0] * inv, o[1] * inv);
      packed.y = pack_bf16x2(o[2] * inv, o[3] * inv);
      *reinterpret_cast<uint2*>(dst) = packed;
    } else {
      const size_t slot = ws_base + static_cast<size_t>(h) * num_splits;
      *reinterpret_cast<float4*>(ws_acc + slot * D + d4) = make_float4(o[0] * inv, o[1] * inv, o[2] * inv, o[3] * inv);
      if (d4 == 0) {
        ws_ml[2 * slot] = cta_max;
        ws_ml[2 * slot + 1] = sum;
      }
    }
  }
  if (num_splits > 1) merge_if_last<D>(a, num_splits, plan_chunk, spread, ws_acc, ws_ml, counters_end);
}

template <int D, int G>
void launch_decode(const PagedAttentionArgs& a, const DecodePlan& plan, float* ws_acc, float* ws_ml, int* counters_end,
                   cudaStream_t stream) {
  const dim3 grid(a.num_kv_heads, a.num_seqs, plan.num_splits);
  const bool spread = a.num_seqs * a.num_kv_heads < kDecodeTargetCtas / 2;  // see seq_chunk
  const auto kernel = a.fp8_cache ? decode_split_kernel<D, G, true> : decode_split_kernel<D, G, false>;
  launch_programmatic("decode_split_kernel", kernel, grid, dim3(kDecodeThreads), 0, stream, a, plan.num_splits,
                      plan.chunk, spread, ws_acc, ws_ml, counters_end);
}

template <int D>
void dispatch_group(const PagedAttentionArgs& a, const DecodePlan& plan, float* ws_acc, float* ws_ml, int* counters_end,
                    cudaStream_t stream) {
  switch (a.num_heads / a.num_kv_heads) {
    case 1:
      return launch_decode<D, 1>(a, plan, ws_acc, ws_ml, counters_end, stream);
    case 2:
      return launch_decode<D, 2>(a, plan, ws_acc, ws_ml, counters_end, stream);
    case 3:
      return launch_decode<D, 3>(a, plan, ws_acc, ws_ml, counters_end, stream);
    case 4:
      return launch_decode<D, 4>(a, plan, ws_acc, ws_ml, counters_end, stream);
    case 5:
      return launch_decode<D, 5>(a, plan, ws_acc, ws_ml, counters_end, stream);
    case 6:
      return launch_decode<D, 6>(a, plan, ws_acc, ws_ml, counters_end, stream);
    case 7:
      return launch_decode<D, 7>(a, plan, ws_acc, ws_ml, counters_end, stream);
    default:
      return launch_decode<D, 8>(a, plan, ws_acc, ws_ml, counters_end, stream);
  }
}

}  // namespace

size_t decode_workspace_bytes(int max_num_seqs, int num_heads, int head_dim, int max_seqlen_k) {
  if (max_num_seqs <= 0 || num_heads <= 0 || head_dim <= 0) return 0;
  // num_kv_heads <= num_heads: counters for every (sequence, KV head) of any launch within the bounds.
  return decode_workspace_floats(max_num_seqs, num_heads, head_dim, max_seqlen_k) * sizeof(float) +
         decode_workspace_counter_bytes(max_num_seqs, num_heads);
}

size_t decode_workspace_counter_bytes(int num_seqs, int num_kv_heads) {
  return static_cast<size_t>(std::max(num_seqs, 0)) * std::max(num_kv_heads, 0) * sizeof(int);
}

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

void paged_attention_decode(const PagedAttentionArgs& args, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) {
  validate_args(args, "paged_attention_decode");
  const int group_size = args.num_heads / args.num_kv_heads;
  if (group_size > kDecodeMaxGroup)
    throw EngineError("paged_attention_decode: " + std::to_string(group_size) + " query heads per KV head; at most " +
                      std::to_string(kDecodeMaxGroup) + " are supported");
  if (args.num_seqs == 0) return;
  if (args.num_seqs > 65535)
    throw EngineError("paged_attention_decode: num_seqs " + std::to_string(args.num_seqs) +
                      " exceeds the grid limit 65535");
  const DecodePlan plan = plan_decode(args.num_seqs, args.num_kv_heads, args.max_seqlen_k);
  float* ws_acc = nullptr;
  float* ws_ml = nullptr;
  int* counters_end = nullptr;
  if (plan.num_splits > 1) {
    const size_t acc_floats = static_cast<size_t>(args.num_seqs) * args.num_heads * plan.num_splits * args.head_dim;
    const size_t need =
        (acc_floats + static_cast<size_t>(args.num_seqs) * args.num_heads * plan.num_splits * 2) * sizeof(float) +
        decode_workspace_counter_bytes(args.num_seqs, args.num_kv_heads);
    if (workspace == nullptr || workspace_bytes < need)
      throw EngineError("paged_attention_decode: workspace of " + std::to_string(workspace_bytes) +
                        " bytes is smaller than the " + std::to_string(need) + " this launch needs (" +
                        std::to_string(plan.num_splits) + " splits); size it with decode_workspace_bytes");
    if ((reinterpret_cast<uintptr_t>(workspace) & 15u) != 0)
      throw EngineError("paged_attention_decode: workspace must be 16-byte aligned");
    if (workspace_bytes % sizeof(int) != 0)
      throw EngineError("paged_attention_decode: workspace bytes must be a multiple of 4");
    ws_acc = static_cast<float*>(workspace);
    ws_ml = ws_acc + acc_floats;
    counters_end = reinterpret_cast<int*>(static_cast<char*>(workspace) + workspace_bytes);
  }
  if (args.head_dim == 64) {
    dispatch_group<64>(args, plan, ws_acc, ws_ml, counters_end, stream);
  } else {
    dispatch_group<128>(args, plan, ws_acc, ws_ml, counters_end, stream);
  }
}

}  // namespace nanovllm::cuda
