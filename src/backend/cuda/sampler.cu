// Sampling, one token per logits row. Filters in backend.h's order: temperature, min_p, top_k, top_p, then
// Gumbel-max: token = argmax over kept tokens of logit / T - log(-log(u)), u = philox_uniform(seed, step,
// token), which draws from the filtered softmax without normalising or sorting.
//
// Two paths, chosen per row on the device (the row's parameters live in device memory, so one captured
// graph serves any mix):
//  * fast (no top_k / top_p; greedy, plain temperature, min_p): on sm_90+ one pass (cluster_sample_kernel):
//    a thread-block cluster of up to 16 blocks per row holds the row in registers, exchanges the slice maxima
//    through distributed shared memory, draws the noise only for tokens within 19.6 of the row's largest z
//    (see prune_below) and merges the slice winners in block 0. Elsewhere (sm_80, vocab > 163840) the
//    chunked path: 8192-logit chunks, [sampling rows] chunk maxima -> per-chunk best (four consecutive tokens
//    a thread, their noise from one Philox evaluation) -> per-row merge (two reads of the logits, the workspace
//    of sampler_workspace_bytes); it also serves more than kClusterMaxRows rows. Nothing is sorted.
//  * filtered (top_k and/or top_p): one block per row. A cheap lower bound on the kept keys, one pass that
//    counts min_p's survivors and collects those above the bound into a shared list, a sort of that list,
//    then top_k / top_p / the Gumbel argmax on it (see filtered_sample_kernel). Rows whose list overflows
//    take the exact radix selects (filtered_by_radix_select). Masses are in 2^-40 fixed point on both, so
//    sums are exact and reproducible.
// Ties: greedy takes the lowest index; the Gumbel argmax too (ties have probability ~0). Tokens whose z is
// -inf or NaN are never kept, min_p never drops the top token, and a row left with none falls back to
// greedy on the raw logits. The CPU sampler (cpu/sampler.cpp) takes the
// same steps, so a seeded row draws the same token on both unless fp32 rounding decides a near tie.
//
// Shard mode (sample_shard, SamplerArgs::best_key set) runs the fast path on one vocabulary shard: the
// columns [0, vocab) of rows row_stride apart, noise drawn for the global token token_offset + i, no
// top_k / top_p / min_p (row_params drops them) and no greedy fallback. The argmax, the pruning (relative
// to the shard's own maximum, still exact) and the keys are the same code and floats as sample()'s, so the
// best key over the shards is sample()'s pick; write_pick outputs the key with the token.
#include <cooperative_groups.h>

#include <cfloat>
#include <climits>
#include <cstdint>

#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/radix_select.cuh"
#include "backend/cuda/sampler_candidates.cuh"
#include "backend/cuda/sampler_paths.cuh"
#include "backend/philox.h"

namespace nanovllm::cuda {
namespace {

constexpr int kChunk = 8192;
constexpr int kChunkThreads = 256;
constexpr int kRowThreads = 512;
constexpr int kCandidates = 4096;  // filtered path's shared list; >= 2 * kRowThreads
constexpr int kUnroll = 4;         // 16-byte loads in flight per thread in the filtered path's streaming passes
constexpr double kMassScale = 1099511627776.0;  // 2^40

struct RowParams {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
  uint64_t seed;
  uint32_t step;
  int token_offset;  // global id of column 0 (shard mode), for the noise
};

__device__ __forceinline__ bool is_shard(const SamplerArgs& a) { return a.best_key != nullptr; }

__device__ __forceinline__ RowParams row_params(const SamplerArgs& a, int r) {
  if (is_shard(a)) {  // plain temperature sampling (the filters need the whole row)
    return {a.temperature[r], 0, 1.0f, 0.0f, static_cast<uint64_t>(a.seed[r]), static_cast<uint32_t>(a.step[r]),
            a.token_offset};
  }
  return {a.temperature[r],
          a.top_k[r],
          a.top_p[r],
          a.min_p[r],
          static_cast<uint64_t>(a.seed[r]),
          static_cast<uint32_t>(a.step[r]),
          0};
}

__device__ __forceinline__ const float* row_of(const SamplerArgs& a, int r) {
  return a.logits + static_cast<int64_t>(r) * (a.row_stride > 0 ? a.row_stride : a.vocab);
}

__device__ __forceinline__ bool is_greedy(const RowParams& p) { return !(p.temperature > 0.0f); }

__device__ __forceinline__ bool needs_filtered_path(const RowParams& p, int vocab) {
  return !is_greedy(p) && ((p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f);
}

// u is clamped below 1: philox_uniform returns exactly 1.0f once in 2^24 draws (the "+ 0.5f" of its last
// step rounds 2^24 - 0.5 up), and u = 1 would give infinite noise. cpu/sampler.cpp clamps the same way.
constexpr float kLargestUniform = 0x1.fffffep-1f;  // 1 - 2^-24

__device__ __forceinline__ float gumbel_of(float u) { return -logf(-logf(fminf(u, kLargestUniform))); }

// token is the column; the noise is that of the global id p.token_offset + token.
__device__ __forceinline__ float gumbel(const RowParams& p, int token) {
  return gumbel_of(philox_uniform(p.seed, p.step, static_cast<uint32_t>(p.token_offset + token)));
}

// The uniforms of columns token .. token + 3 (token a multiple of 4): one Philox evaluation for the four when their
// global ids are one group (philox4), which is most of a draw's instructions.
__device__ __forceinline__ void uniforms4(const RowParams& p, int token, float (&u)[4]) {
  const auto id = static_cast<uint32_t>(p.token_offset + token);
  if ((id & 3u) == 0) {
    uint32_t c[4];
    philox4(p.seed, p.step, id >> 2, c);
#pragma unroll
    for (int q = 0; q < 4; ++q) u[q] = philox_word_uniform(c[q]);
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) u[q] = philox_uniform(p.seed, p.step, id + q);
  }
}

// The noise lies in [-log(-log 2^-25), -log(-log(1 - 2^-24))] = [-2.853, 16.636]. So a token whose z is more
// than 19.49 below the row's largest z can never beat the token holding that largest z, and its noise need
// not be drawn: an exact pruning (same argmax) that skips most of a real model's vocabulary, where the
// Philox evaluation is the fast path's main cost. The margin covers fp32 rounding of z + g.
__device__ __forceinline__ float prune_below(float scaled_max) {
  return scaled_max - 19.6f - fabsf(scaled_max) * 1e-6f;
}

// (value, index) argmax with the lowest index on ties; NaN never wins.
struct Best {
  float value;
  int index;
};

__device__ __forceinline__ void take(Best& b, float v, int i) {
  if (v > b.value || (v == b.value && i < b.index)) {
    b.value = v;
    b.index = i;
  }
}

__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, b.value, offset);
    const int i = __shfl_xor_sync(0xffffffffu, b.index, offset);
    take(b, v, i);
  }
  return b;
}

__device__ Best block_best(Best b, Best* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  b = warp_best(b);
  __syncthreads();
  if (lane == 0) scratch[warp] = b;
  __syncthreads();
  b = lane < warps ? scratch[lane] : Best{-INFINITY, INT_MAX};
  return warp_best(b);
}

// The row's result from its winner (index INT_MAX: none). sample(): the token, 0 when none (every logit
// NaN). Shard mode: the key and the global token, or -inf and INT_MAX when nothing has probability (greedy
// -inf "winners" included).
__device__ __forceinline__ void write_pick(const SamplerArgs& a, int r, Best b) {
  if (!is_shard(a)) {
    a.token_ids[r] = b.index == INT_MAX ? 0 : b.index;
    return;
  }
  const bool none = b.index == INT_MAX || !(b.value > -INFINITY);
  a.best_key[r] = none ? -INFINITY : b.value;
  a.token_ids[r] = none ? INT_MAX : a.token_offset + b.index;
}

struct FastWorkspace {
  float* chunk_max;   // [rows, chunks]
  float* best_value;  // [rows, chunks]
  int* best_index;    // [rows, chunks]
};

__host__ __device__ inline int chunks_for(int vocab) { return (vocab + kChunk - 1) / kChunk; }

FastWorkspace carve(void* workspace, int rows, int vocab) {
  const size_t n = static_cast<size_t>(rows) * chunks_for(vocab);
  float* base = static_cast<float*>(workspace);
  return {base, base + n, reinterpret_cast<int*>(base + 2 * n)};
}

// Raw-logit maximum of each chunk, for the sampling (non-greedy) rows of the fast path: min_p and the
// noise pruning need the row's largest z.
__global__ void __launch_bounds__(kChunkThreads) chunk_max_kernel(const SamplerArgs a, FastWorkspace ws) {
  __shared__ float scratch[32];
  const int r = blockIdx.y, c = blockIdx.x;
  const RowParams p = row_params(a, r);
  if (is_greedy(p) || needs_filtered_path(p, a.vocab)) return;
  const float* row = row_of(a, r);
  const int end = min(a.vocab, (c + 1) * kChunk);
  float m = -INFINITY;
  for (int i = c * kChunk + threadIdx.x; i < end; i += kChunkThreads) m = fmaxf(m, row[i]);
  m = block_max(m, scratch);
  if (threadIdx.x == 0) ws.chunk_max[r * gridDim.x + c] = m;
}

// Best (Gumbel-perturbed or, for greedy rows, raw) logit of each chunk among the tokens min_p keeps.
__global__ void __launch_bounds__(kChunkThreads) chunk_best_kernel(const SamplerArgs a, FastWorkspace ws) {
  __shared__ Best scratch[32];
  const int r = blockIdx.y, c = blockIdx.x, chunks = gridDim.x;
  const RowParams p = row_params(a, r);
  if (needs_filtered_path(p, a.vocab)) return;
  const float* row = row_of(a, r);
  const int end = min(a.vocab, (c + 1) * kChunk);
  Best best{-INFINITY, INT_MAX};
  if (is_greedy(p)) {
    for (int i = c * kChunk + threadIdx.x; i < end; i += kChunkThreads) take(best, row[i], i);
  } else {
    const bool use_min_p = p.min_p > 0.0f;
    float m = -INFINITY;
    for (int j = 0; j < chunks; ++j) m = fmaxf(m, ws.chunk_max[r * chunks + j]);
    const float scaled_max = m / p.temperature;
    const float cutoff = prune_below(scaled_max);
    // Four consecutive tokens a thread (kChunk is a multiple of 4), so their noise takes one Philox evaluation.
    for (int first = c * kChunk + 4 * threadIdx.x; first < end; first += 4 * kChunkThreads) {
      float s[4];
      bool any = false;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        s[q] = first + q < end ? row[first + q] / p.temperature : -INFINITY;
        const bool kept = s[q] > -INFINITY &&  // -inf or NaN: no probability
                          !(s[q] < cutoff) &&  // cannot win (see prune_below)
                          (!use_min_p || s[q] == scaled_max || expf(s[q] - scaled_max) >= p.min_p);  // top stays
        if (!kept) s[q] = -INFINITY;
        any = any || kept;
      }
      if (!any) continue;
      float u[4];
      uniforms4(p, first, u);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (s[q] > -INFINITY) take(best, s[q] + gumbel_of(u[q]), first + q);
    }
  }
  best = block_best(best, scratch);
  if (threadIdx.x == 0) {
    ws.best_value[r * chunks + c] = best.value;
    ws.best_index[r * chunks + c] = best.index;
  }
}

// One warp per row merges the chunk winners.
__global__ void merge_chunks_kernel(const SamplerArgs a, FastWorkspace ws, int chunks) {
  const int r = blockIdx.x;
  const RowParams p = row_params(a, r);
  if (needs_filtered_path(p, a.vocab)) return;
  Best best{-INFINITY, INT_MAX};
  for (int j = threadIdx.x; j < chunks; j += 32)
    take(best, ws.best_value[r * chunks + j], ws.best_index[r * chunks + j]);
  best = warp_best(best);
  if (best.index == INT_MAX && !is_shard(a)) {  // nothing kept (every z is -inf or NaN): greedy on the raw logits
    const float* row = row_of(a, r);
    for (int i = threadIdx.x; i < a.vocab; i += 32) take(best, row[i], i);
    best = warp_best(best);
  }
  if (threadIdx.x == 0) write_pick(a, r, best);
}

// The single-pass fast path (sm_90 thread-block clusters): one cluster of up to 16 blocks per row, each
// block holding its slice of the row in registers (kClusterVecs float4 per thread, one read of the logits).
// The blocks exchange their slice maxima through distributed shared memory, so every block knows the row's
// largest z before drawing any noise (min_p and the pruning of prune_below need it); then each block takes
// its slice's best (value, index) and block 0 of the cluster merges them. Greedy rows, and rows where no
// token has probability (z_max = -inf), take the argmax of the raw logits from the same registers.
constexpr int kClusterThreads = 512;
constexpr int kClusterVecs = 5;
constexpr int kMaxClusterBlocks = 16;  // non-portable on sm_90 (portable is 8): allowed explicitly at launch
constexpr int kClusterSliceCapacity = kClusterThreads * 4 * kClusterVecs;  // 10240 logits per block
// The first noise round covers tokens within this of the row's largest z (see cluster_sample_kernel).
constexpr float kFirstRoundDepth = 2.0f;
// Above the largest noise (16.64, see prune_below), with room for fp32 rounding of z + g.
constexpr float kMaxGumbel = 17.0f;

struct ClusterPlan {
  int blocks = 0;  // 0: the vocabulary does not fit in one cluster's registers
  int slice = 0;   // logits per block, a multiple of 4
};

ClusterPlan plan_cluster(int vocab) {
  int blocks = (vocab + kClusterThreads * 4 - 1) / (kClusterThreads * 4);  // at least ~1 float4 per thread
  blocks = blocks < 1 ? 1 : (blocks > kMaxClusterBlocks ? kMaxClusterBlocks : blocks);
  const int slice = ((vocab + blocks - 1) / blocks + 3) / 4 * 4;
  if (slice > kClusterSliceCapacity) return {};
  return {blocks, slice};
}

__global__ void __launch_bounds__(kClusterThreads, 2) cluster_sample_kernel(const SamplerArgs a, int slice) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ float reduce_scratch[32];
  __shared__ Best best_scratch[32];
  __shared__ float block_max_value;
  __shared__ float row_max_value;
  __shared__ Best block_best_value;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int blocks = static_cast<int>(cluster.num_blocks());
  const int r = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const RowParams p = row_params(a, r);
  if (needs_filtered_path(p, a.vocab)) return;  // the same for every block of the cluster: no barrier waits
  const float* row = row_of(a, r);
  const int begin = rank * slice;
  const int end = min(a.vocab, begin + slice);
  const bool vectorized = (reinterpret_cast<uintptr_t>(row) & 15u) == 0;  // begin is a multiple of 4

  // Element q of vector j of this thread is token begin + (j * kClusterThreads + threadIdx.x) * 4 + q.
  float x[kClusterVecs][4];
#pragma unroll
  for (int j = 0; j < kClusterVecs; ++j) {
    const int i = begin + (j * kClusterThreads + threadIdx.x) * 4;
    if (vectorized && i + 4 <= end) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(row + i));  // stays in L2 for the noise loop
      x[j][0] = v.x;
      x[j][1] = v.y;
      x[j][2] = v.z;
      x[j][3] = v.w;
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q) x[j][q] = i + q < end ? __ldg(row + i + q) : -INFINITY;
    }
  }

  // The row's largest logit, which only sampled rows use (greedy ones skip its block and cluster rounds; the
  // branch is the same for every block of the cluster, a row's).
  float scaled_max = -INFINITY;
  if (!is_greedy(p)) {
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < kClusterVecs; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) m = fmaxf(m, x[j][q]);  // padding is -inf; fmaxf skips NaN
    }
    m = block_max(m, reduce_scratch);
    if (threadIdx.x == 0) block_max_value = m;
    cluster.sync();
    if (warp == 0) {
      float v = lane < blocks ? *cluster.map_shared_rank(&block_max_value, lane) : -INFINITY;
      v = warp_max(v);
      if (lane == 0) row_max_value = v;
    }
    __syncthreads();
    // max(x) / t == max(x / t): division by t > 0 is monotonic, rounding included.
    scaled_max = row_max_value / p.temperature;
  }

  Best best{-INFINITY, INT_MAX};
  // Greedy, or (sample() only) nothing has probability: raw argmax. A shard with nothing of probability
  // takes the other branch, which finds no candidate.
  if (is_greedy(p) || (!is_shard(a) && !(scaled_max > -INFINITY))) {
#pragma unroll
    for (int j = 0; j < kClusterVecs; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i = begin + (j * kClusterThreads + threadIdx.x) * 4 + q;
        if (i < end) take(best, x[j][q], i);
      }
    }
  } else {
    // Which of this thread's tokens need their noise drawn: kept by min_p and not pruned. The noise loops
    // run over the set bits (one copy of the Philox code instead of 20 unrolled ones), reloading the few
    // logits they need from L1/L2. Two rounds: first the tokens within kFirstRoundDepth of the top, then
    // the rest, of which a token more than kMaxGumbel below the block's best value so far cannot win
    // (exact, as cpu/sampler.cpp's skip): on flat rows that skips about half of the noise.
    const float cutoff = prune_below(scaled_max);
    const float first_round = scaled_max - kFirstRoundDepth;
    const bool use_min_p = p.min_p > 0.0f;
    uint32_t near_top = 0, rest = 0;
#pragma unroll
    for (int j = 0; j < kClusterVecs; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i = begin + (j * kClusterThreads + threadIdx.x) * 4 + q;
        const float s = x[j][q] / p.temperature;
        const bool candidate = i < end && s > -INFINITY && !(s < cutoff) &&
                               (!use_min_p || s == scaled_max || expf(s - scaled_max) >= p.min_p);
        near_top |= candidate && s >= first_round ? 1u << (4 * j + q) : 0u;
        rest |= candidate && !(s >= first_round) ? 1u << (4 * j + q) : 0u;
      }
    }
    // One token's noise at a time: drawing a vector's four from one Philox evaluation measured slower here, where
    // few tokens of a vector are marked (R=1 peaked 8.4 -> 9.3 µs, flat 19.1 -> 21.1; results.md R234).
    auto token_of_bit = [&](int bit) { return begin + ((bit >> 2) * kClusterThreads + threadIdx.x) * 4 + (bit & 3); };
    while (near_top != 0) {
      const int i = token_of_bit(__ffs(near_top) - 1);
      near_top &= near_top - 1;
      const float s = row[i] / p.temperature;
      take(best, s + gumbel(p, i), i);
    }
    const Best leader = block_best(best, best_scratch);
    const float hopeless = leader.value - kMaxGumbel - fabsf(leader.value) * 1e-6f;  // -inf when none yet
    while (rest != 0) {
      const int i = token_of_bit(__ffs(rest) - 1);
      rest &= rest - 1;
      const float s = row[i] / p.temperature;
      if (s < hopeless) continue;
      take(best, s + gumbel(p, i), i);
    }
  }
  best = block_best(best, best_scratch);
  if (threadIdx.x == 0) block_best_value = best;
  cluster.sync();
  if (rank == 0 && warp == 0) {
    Best b = lane < blocks ? *cluster.map_shared_rank(&block_best_value, lane) : Best{-INFINITY, INT_MAX};
    b = warp_best(b);
    if (lane == 0) write_pick(a, r, b);
  }
  cluster.sync();  // block 0 has read every block's shared memory before any block exits
#else
  (void)a;
  (void)slice;
  __trap();  // launched only on devices with cluster launch (sm_90+)
#endif
}

// The exact fallback of the filtered path (the previous design): radix selects over the whole row, every
// pass a read of the row with contended shared atomics. Taken only when the candidate list overflows or
// misses the kept set (thousands of tied logits, top_k > 1024, a flat row whose nucleus is huge).
__device__ void filtered_by_radix_select(const SamplerArgs& a, int r, const RowParams& p, RadixSelectShared& select,
                                         float* scratch, Best* best_scratch) {
  const float* row = row_of(a, r);
  const int vocab = a.vocab;
  const float t = p.temperature;

  float m = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kRowThreads) m = fmaxf(m, row[i] / t);
  const float scaled_max = block_max(m, scratch);
  const bool use_min_p = p.min_p > 0.0f;
  // Tokens with -inf or NaN z have no probability and are never kept.
  // The most likely token always stays (even for min_p > 1).
  auto min_p_keeps = [&](float s) {
    return s > -INFINITY && (!use_min_p || s == scaled_max || expf(s - scaled_max) >= p.min_p);
  };

  // min_p keeps a prefix of the (value desc, index asc) order; top_k shortens it.
  float kept_local = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kRowThreads) kept_local += min_p_keeps(row[i] / t) ? 1.0f : 0.0f;
  const int kept = static_cast<int>(block_sum(kept_local, scratch) + 0.5f);
  uint64_t threshold = 0;
  if (p.top_k > 0 && p.top_k < kept) {
    threshold = radix_select_by_weight(
        [&](auto&& f) {
          for (int i = threadIdx.x; i < vocab; i += kRowThreads) {
            const float s = row[i] / t;
            if (min_p_keeps(s)) f(order_key(s, i), 1ull);
          }
        },
        static_cast<unsigned long long>(p.top_k), select);
  }
  auto mass = [&](float s) { return static_cast<unsigned long long>(expf(s - scaled_max) * kMassScale); };
  if (p.top_p < 1.0f) {
    // Exact integer total of the survivors' mass, then the smallest prefix reaching top_p of it.
    __shared__ unsigned long long total_mass;
    if (threadIdx.x == 0) total_mass = 0;
    __syncthreads();
    unsigned long long local = 0;
    for (int i = threadIdx.x; i < vocab; i += kRowThreads) {
      const float s = row[i] / t;
      if (min_p_keeps(s) && order_key(s, i) >= threshold) local += mass(s);
    }
    atomicAdd(&total_mass, local);
    __syncthreads();
    const unsigned long long target =
        static_cast<unsigned long long>(ceil(static_cast<double>(p.top_p) * static_cast<double>(total_mass)));
    const uint64_t low = threshold;
    threshold = radix_select_by_weight(
        [&](auto&& f) {
          for (int i = threadIdx.x; i < vocab; i += kRowThreads) {
            const float s = row[i] / t;
            const uint64_t key = order_key(s, i);
            if (min_p_keeps(s) && key >= low) f(key, mass(s));
          }
        },
        target, select);
  }

  Best best{-INFINITY, INT_MAX};
  const float cutoff = prune_below(scaled_max);
  for (int i = threadIdx.x; i < vocab; i += kRowThreads) {
    const float s = row[i] / t;
    if (!(s < cutoff) && min_p_keeps(s) && order_key(s, i) >= threshold) take(best, s + gumbel(p, i), i);
  }
  best = block_best(best, best_scratch);
  if (best.index == INT_MAX) {  // nothing kept (every z is -inf or NaN): greedy on the raw logits
    for (int i = threadIdx.x; i < vocab; i += kRowThreads) take(best, row[i], i);
    best = block_best(best, best_scratch);
  }
  if (threadIdx.x == 0) a.token_ids[r] = best.index == INT_MAX ? 0 : best.index;
}

// Rows with top_k / top_p: one block per row, two reads of the row plus work on a short shared list.
//  1. Largest z, and each thread's two largest keys of tokens with probability (z > -inf).
//  2. A lower bound on the kept set's keys: with top_k <= 1024, the top_k-th largest thread key (at least
//     top_k tokens reach it); with top_p alone, the first sorted thread key whose prefix of thread keys holds
//     top_p of an over-estimate of the total mass (pass 1 sums it online in fp32), else
//     z_max - (log(V / (1 - top_p)) + 2) (tokens further down hold less than 1 - top_p of the mass). One pass counts
//     min_p's survivors, sums their mass and appends the survivors at or above the bound to the list; the list is
//     sorted.
//  3. On the sorted list: top_k is its first k entries, top_p the shortest prefix whose mass reaches
//     ceil(top_p * total) (masses in 2^-40 fixed point, as the radix path sums them), then the Gumbel argmax.
// Each step checks that the list really holds what it needs (all of top_k's set, or the whole nucleus);
// otherwise the row takes filtered_by_radix_select, so the bound is a speed heuristic, never a result.
__global__ void __launch_bounds__(kRowThreads) filtered_sample_kernel(const SamplerArgs a) {
  __shared__ RadixSelectShared select;
  __shared__ float scratch[32];
  __shared__ Best best_scratch[32];
  __shared__ uint64_t candidates[kCandidates];
  __shared__ unsigned candidate_count, kept_count;
  __shared__ unsigned long long kept_mass, set_mass;
  __shared__ int final_count;
  __shared__ uint64_t top_p_bound;
  const int r = blockIdx.x;
  const RowParams p = row_params(a, r);
  if (!needs_filtered_path(p, a.vocab)) return;
  const float* row = row_of(a, r);
  const int vocab = a.vocab;
  const float t = p.temperature;
  const unsigned lane = threadIdx.x & 31u;

  // Pass 1 (also a float estimate of the total mass, online per thread, for the top_p bound).
  float m = -INFINITY, local_top = -INFINITY, local_sum = 0.0f;
  TopTwoKeys tops;
  for_each_logit<kUnroll>(row, vocab, [&](int i, float x, bool valid) {
    if (!valid) return;
    m = fmaxf(m, x);
    const float s = x / t;
    if (!(s > -INFINITY)) return;
    tops.add(order_key(s, i));
    if (s > local_top) {
      local_sum = local_sum * expf(local_top - s) + 1.0f;
      local_top = s;
    } else {
      local_sum += expf(s - local_top);
    }
  });
  // max(x) / t == max(x / t): division by t > 0 is monotonic, rounding included.
  const float scaled_max = block_max(m, scratch) / t;
  const bool use_min_p = p.min_p > 0.0f;
  auto min_p_keeps = [&](float s) {
    return s > -INFINITY && (!use_min_p || s == scaled_max || expf(s - scaled_max) >= p.min_p);
  };
  auto mass = [&](float s) { return static_cast<unsigned long long>(expf(s - scaled_max) * kMassScale); };
  // Sum of exp(z - z_max) over tokens with probability: an upper bound (with margin for fp32 rounding) of
  // the mass of any kept set.
  const float mass_estimate =
      block_sum(local_top == -INFINITY ? 0.0f : local_sum * expf(local_top - scaled_max), scratch);

  // Step 2.
  uint64_t bound = 0;
  const bool top_k_bound = p.top_k > 0 && p.top_k <= 2 * kRowThreads;
  if (top_k_bound || p.top_p < 1.0f) {
    sort_thread_tops(tops, candidates);
    if (top_k_bound) bound = candidates[p.top_k - 1];
    if (bound == 0 && p.top_p < 1.0f && threadIdx.x < 32) {
      // The sorted thread keys are distinct tokens: once the kept ones among the first j hold top_p of the
      // (over-estimated) total mass, the nucleus ends at or above the j-th.
      const double goal = static_cast<double>(p.top_p) * static_cast<double>(mass_estimate) * 1.001 * kMassScale;
      unsigned long long cumulative = 0;
      uint64_t found = 0;
      for (int base = 0; base < 2 * kRowThreads && found == 0; base += 32) {
        const uint64_t key = candidates[base + static_cast<int>(lane)];
        const float s = value_of_key(key);
        const unsigned long long w = key != 0 && min_p_keeps(s) ? mass(s) : 0ull;
        unsigned long long inclusive = w;
#pragma unroll
        for (int offset = 1; offset < 32; offset <<= 1) {
          const unsigned long long up = __shfl_up_sync(0xffffffffu, inclusive, offset);
          if (lane >= static_cast<unsigned>(offset)) inclusive += up;
        }
        const unsigned hit =
            __ballot_sync(0xffffffffu, key != 0 && static_cast<double>(cumulative + inclusive) >= goal);
        if (hit) found = __shfl_sync(0xffffffffu, key, __ffs(hit) - 1);
        cumulative += __shfl_sync(0xffffffffu, inclusive, 31);
      }
      if (lane == 0) top_p_bound = found;
    }
    __syncthreads();
    if (bound == 0 && p.top_p < 1.0f) bound = top_p_bound;
  }
  if (bound == 0 && p.top_p < 1.0f) {
    // Tokens further than this below the top hold less than 1 - top_p of the mass together.
    const float depth = logf(static_cast<float>(vocab) / fmaxf(1.0f - p.top_p, 1e-30f)) + 2.0f;
    bound = lowest_key_of_value(scaled_max - depth);
  }
  if (threadIdx.x == 0) {
    candidate_count = 0;
    kept_count = 0;
    kept_mass = 0;
    set_mass = 0;
    final_count = -1;
  }
  __syncthreads();
  unsigned kept_local = 0;
  unsigned long long mass_local = 0;
  for_each_logit<kUnroll>(row, vocab, [&](int i, float x, bool valid) {
    const float s = x / t;
    const bool kept = valid && min_p_keeps(s);
    uint64_t key = 0;
    if (kept) {
      ++kept_local;
      mass_local += mass(s);
      key = order_key(s, i);
    }
    append_candidate(kept && key >= bound, key, candidates, kCandidates, &candidate_count);
  });
  kept_local = __reduce_add_sync(0xffffffffu, kept_local);
  mass_local = warp_sum_u64(mass_local);
  if (lane == 0) {
    atomicAdd(&kept_count, kept_local);
    atomicAdd(&kept_mass, mass_local);
  }
  __syncthreads();
  const int count = static_cast<int>(candidate_count);
  const unsigned kept = kept_count;
  if (count > kCandidates || kept == 0) {
    filtered_by_radix_select(a, r, p, select, scratch, best_scratch);
    return;
  }
  sort_candidates(candidates, count);

  // Step 3. The list is the `count` largest survivors, in order.
  const bool top_k_cuts = p.top_k > 0 && static_cast<unsigned>(p.top_k) < kept;
  const int set_size = top_k_cuts ? p.top_k : static_cast<int>(kept);  // after min_p and top_k
  int usable;                                                          // how many list entries belong to that set
  unsigned long long total;                                            // the set's mass
  if (count >= set_size) {
    usable = set_size;
    unsigned long long local = 0;
    for (int j = threadIdx.x; j < usable; j += kRowThreads) local += mass(value_of_key(candidates[j]));
    local = warp_sum_u64(local);
    if (lane == 0) atomicAdd(&set_mass, local);
    __syncthreads();
    total = top_k_cuts ? set_mass : kept_mass;
  } else if (!top_k_cuts && p.top_p < 1.0f) {
    usable = count;  // the nucleus must end inside the list
    total = kept_mass;
  } else {
    filtered_by_radix_select(a, r, p, select, scratch, best_scratch);
    return;
  }
  int keep = usable;
  if (p.top_p < 1.0f) {
    unsigned long long goal =
        static_cast<unsigned long long>(ceil(static_cast<double>(p.top_p) * static_cast<double>(total)));
    if (goal < 1) goal = 1;
    if (goal > total) goal = total;
    if (threadIdx.x < 32) {  // one warp walks the prefix sums
      unsigned long long cumulative = 0;
      int found = -1;
      for (int base = 0; base < usable && found < 0; base += 32) {
        const int j = base + static_cast<int>(lane);
        const unsigned long long w = j < usable ? mass(value_of_key(candidates[j])) : 0ull;
        unsigned long long inclusive = w;
#pragma unroll
        for (int offset = 1; offset < 32; offset <<= 1) {
          const unsigned long long up = __shfl_up_sync(0xffffffffu, inclusive, offset);
          if (lane >= static_cast<unsigned>(offset)) inclusive += up;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, j < usable && cumulative + inclusive >= goal);
        if (hit) found = base + __ffs(hit);  // prefix length
        cumulative += __shfl_sync(0xffffffffu, inclusive, 31);
      }
      if (lane == 0) final_count = found;
    }
    __syncthreads();
    keep = final_count;
    if (keep < 0) {  // the nucleus reaches below the list
      filtered_by_radix_select(a, r, p, select, scratch, best_scratch);
      return;
    }
  }

  Best best{-INFINITY, INT_MAX};
  for (int j = threadIdx.x; j < keep; j += kRowThreads) {
    const uint64_t key = candidates[j];
    const int i = index_of_key(key);
    take(best, value_of_key(key) + gumbel(p, i), i);
  }
  best = block_best(best, best_scratch);
  if (threadIdx.x == 0) a.token_ids[r] = best.index;
}
}  // namespace

size_t sampler_workspace_bytes(int max_rows, int vocab) {
  return static_cast<size_t>(max_rows) * chunks_for(vocab) * (2 * sizeof(float) + sizeof(int));
}

namespace {

bool device_has_cluster_launch() {
  int device = 0, supported = 0;
  NANOVLLM_CUDA_CHECK(cudaGetDevice(&device));
  NANOVLLM_CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrClusterLaunch, device));
  return supported != 0;
}

// False when the device refuses the cluster launch (e.g. no room for a 16-block cluster): the error is
// cleared and the caller takes the chunked path.
bool launch_cluster_sample(const SamplerArgs& args, const ClusterPlan& plan, cudaStream_t stream) {
  if (plan.blocks > 8 &&
      cudaFuncSetAttribute(cluster_sample_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(plan.blocks), static_cast<unsigned>(args.rows), 1);
  config.blockDim = dim3(kClusterThreads, 1, 1);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(plan.blocks);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  if (cudaLaunchKernelEx(&config, cluster_sample_kernel, args, plan.slice) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

// The Backend op a launch serves, for its errors.
const char* op_name(const SamplerArgs& args) { return args.best_key != nullptr ? "sample_shard" : "sample"; }

void launch_chunked_sample(const SamplerArgs& args, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (sampler_workspace_bytes(args.rows, args.vocab) > workspace_bytes) {
    throw EngineError(std::string(op_name(args)) + ": " + std::to_string(args.rows) + " rows of " +
                      std::to_string(args.vocab) + " logits exceed the sampler workspace reserved (" +
                      std::to_string(workspace_bytes) + " bytes); raise BackendLimits");
  }
  const int chunks = chunks_for(args.vocab);
  const FastWorkspace ws = carve(workspace, args.rows, args.vocab);
  const dim3 grid(chunks, args.rows);
  if (chunks > 0) {  // none for an empty shard: the merge writes "nothing"
    chunk_max_kernel<<<grid, kChunkThreads, 0, stream>>>(args, ws);
    NANOVLLM_CHECK_LAUNCH("chunk_max_kernel");
    chunk_best_kernel<<<grid, kChunkThreads, 0, stream>>>(args, ws);
    NANOVLLM_CHECK_LAUNCH("chunk_best_kernel");
  }
  merge_chunks_kernel<<<args.rows, 32, 0, stream>>>(args, ws, chunks);
  NANOVLLM_CHECK_LAUNCH("merge_chunks_kernel");
}

}  // namespace

// Measured on an H200 (bench_sampler, V = 151936, T = 0.6): the cluster path wins at R = 1 (8.4 vs 16.1 us on
// peaked logits, 19.0 vs 21.9 flat) but not from R = 64 on (43 vs 45 us peaked, 123 vs 84 flat; R = 256: 155 vs
// 140 and 446 vs 282), where the chunked path's grid already fills the GPU. So it serves small batches only.
constexpr int kClusterMaxRows = 8;

void launch_sample_via(const SamplerArgs& args, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       PlainSamplerPath path) {
  if (args.rows == 0) return;
  const ClusterPlan plan = plan_cluster(args.vocab);
  const bool cluster =
      path == PlainSamplerPath::kCluster || (path == PlainSamplerPath::kAuto && args.rows <= kClusterMaxRows &&
                                             plan.blocks > 0 && device_has_cluster_launch());
  if (cluster) {
    if (plan.blocks == 0) {
      throw EngineError(std::string(op_name(args)) + ": vocab " + std::to_string(args.vocab) +
                        " exceeds the cluster path's " + std::to_string(kMaxClusterBlocks * kClusterSliceCapacity) +
                        " logits");
    }
  }
  if (!cluster || !launch_cluster_sample(args, plan, stream)) {
    if (path == PlainSamplerPath::kCluster)
      throw EngineError(std::string(op_name(args)) + ": the device refused the cluster launch");
    launch_chunked_sample(args, workspace, workspace_bytes, stream);
  }
  // Shard mode, or inputs whose rows have no top_k / top_p: no row takes the filtered path.
  if (args.best_key != nullptr || !args.any_top_k_or_top_p) return;
  filtered_sample_kernel<<<args.rows, kRowThreads, 0, stream>>>(args);
  NANOVLLM_CHECK_LAUNCH("filtered_sample_kernel");
}

void launch_sample(const SamplerArgs& args, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  launch_sample_via(args, workspace, workspace_bytes, stream, PlainSamplerPath::kAuto);
}

}  // namespace nanovllm::cuda
