// Sampling, one token per logits row. Filters in backend.h's order: temperature, min_p, top_k, top_p, then
// Gumbel-max: token = argmax over kept tokens of logit / T - log(-log(u)), u = philox_uniform(seed, step,
// token), which draws from the filtered softmax without normalising or sorting.
//
// Two paths, chosen per row on the device (the row's parameters live in device memory, so one captured
// graph serves any mix):
//  * fast (no top_k / top_p; greedy, plain temperature, min_p): the row is cut into 8192-logit chunks, one
//    block per (row, chunk): [sampling rows] chunk maxima -> per-chunk best (value, index) -> a per-row
//    merge. Every logit is read once (twice when sampling); nothing is sorted; the noise is drawn only for
//    tokens within 19.6 of the row's largest z (see prune_below).
//  * filtered (top_k and/or top_p): one block per row. min_p keep-count, then radix selects over unique
//    (value, index) keys find the top-k threshold and the smallest top-p prefix (masses in 2^-40 fixed point,
//    so sums are exact and reproducible), then the same Gumbel argmax over the survivors.
// Ties: greedy takes the lowest index; the Gumbel argmax too (ties have probability ~0). Tokens whose z is
// -inf or NaN are never kept, min_p never drops the top token, and a row left with none falls back to
// greedy on the raw logits. The CPU sampler (cpu/sampler.cpp) takes the
// same steps, so a seeded row draws the same token on both unless fp32 rounding decides a near tie.
#include <cfloat>
#include <climits>

#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/radix_select.cuh"
#include "backend/philox.h"

namespace nanovllm::cuda {
namespace {

constexpr int kChunk = 8192;
constexpr int kChunkThreads = 256;
constexpr int kRowThreads = 512;
constexpr double kMassScale = 1099511627776.0;  // 2^40

struct RowParams {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
  uint64_t seed;
  uint32_t step;
};

__device__ __forceinline__ RowParams row_params(const SamplerArgs& a, int r) {
  return {a.temperature[r], a.top_k[r], a.top_p[r], a.min_p[r], static_cast<uint64_t>(a.seed[r]),
          static_cast<uint32_t>(a.step[r])};
}

__device__ __forceinline__ bool is_greedy(const RowParams& p) { return !(p.temperature > 0.0f); }

__device__ __forceinline__ bool needs_filtered_path(const RowParams& p, int vocab) {
  return !is_greedy(p) && ((p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f);
}

// u is clamped below 1: philox_uniform returns exactly 1.0f once in 2^24 draws (the "+ 0.5f" of its last
// step rounds 2^24 - 0.5 up), and u = 1 would give infinite noise. cpu/sampler.cpp clamps the same way.
constexpr float kLargestUniform = 0x1.fffffep-1f;  // 1 - 2^-24

__device__ __forceinline__ float gumbel(const RowParams& p, int token) {
  const float u = fminf(philox_uniform(p.seed, p.step, static_cast<uint32_t>(token)), kLargestUniform);
  return -logf(-logf(u));
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

struct FastWorkspace {
  float* chunk_max;    // [rows, chunks]
  float* best_value;   // [rows, chunks]
  int* best_index;     // [rows, chunks]
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
  const float* row = a.logits + static_cast<int64_t>(r) * a.vocab;
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
  const float* row = a.logits + static_cast<int64_t>(r) * a.vocab;
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
    for (int i = c * kChunk + threadIdx.x; i < end; i += kChunkThreads) {
      const float s = row[i] / p.temperature;
      if (!(s > -INFINITY)) continue;  // -inf or NaN: no probability
      if (s < cutoff) continue;        // cannot win (see prune_below)
      if (use_min_p && s != scaled_max && !(expf(s - scaled_max) >= p.min_p)) continue;  // top token stays
      take(best, s + gumbel(p, i), i);
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
  for (int j = threadIdx.x; j < chunks; j += 32) take(best, ws.best_value[r * chunks + j], ws.best_index[r * chunks + j]);
  best = warp_best(best);
  if (best.index == INT_MAX) {  // nothing kept (every z is -inf or NaN): greedy on the raw logits
    const float* row = a.logits + static_cast<int64_t>(r) * a.vocab;
    for (int i = threadIdx.x; i < a.vocab; i += 32) take(best, row[i], i);
    best = warp_best(best);
  }
  if (threadIdx.x == 0) a.token_ids[r] = best.index == INT_MAX ? 0 : best.index;
}

// Rows with top_k / top_p: the whole filter chain in one block.
__global__ void __launch_bounds__(kRowThreads) filtered_sample_kernel(const SamplerArgs a) {
  __shared__ RadixSelectShared select;
  __shared__ float scratch[32];
  __shared__ Best best_scratch[32];
  const int r = blockIdx.x;
  const RowParams p = row_params(a, r);
  if (!needs_filtered_path(p, a.vocab)) return;
  const float* row = a.logits + static_cast<int64_t>(r) * a.vocab;
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

}  // namespace

size_t sampler_workspace_bytes(int max_rows, int vocab) {
  return static_cast<size_t>(max_rows) * chunks_for(vocab) * (2 * sizeof(float) + sizeof(int));
}

void launch_sample(const SamplerArgs& args, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (args.rows == 0) return;
  if (sampler_workspace_bytes(args.rows, args.vocab) > workspace_bytes) {
    throw EngineError("sample: " + std::to_string(args.rows) + " rows of " + std::to_string(args.vocab) +
                      " logits exceed the sampler workspace reserved (" + std::to_string(workspace_bytes) +
                      " bytes); raise BackendLimits");
  }
  const int chunks = chunks_for(args.vocab);
  const FastWorkspace ws = carve(workspace, args.rows, args.vocab);
  const dim3 grid(chunks, args.rows);
  chunk_max_kernel<<<grid, kChunkThreads, 0, stream>>>(args, ws);
  NANOVLLM_CHECK_LAUNCH("chunk_max_kernel");
  chunk_best_kernel<<<grid, kChunkThreads, 0, stream>>>(args, ws);
  NANOVLLM_CHECK_LAUNCH("chunk_best_kernel");
  merge_chunks_kernel<<<args.rows, 32, 0, stream>>>(args, ws, chunks);
  NANOVLLM_CHECK_LAUNCH("merge_chunks_kernel");
  filtered_sample_kernel<<<args.rows, kRowThreads, 0, stream>>>(args);
  NANOVLLM_CHECK_LAUNCH("filtered_sample_kernel");
}

}  // namespace nanovllm::cuda
