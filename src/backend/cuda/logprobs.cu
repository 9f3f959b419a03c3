// Log-softmax of raw fp32 logits, one block per row, two reads of the row:
//  1. max and sum of exp in one pass (per-thread online rescaling), and each thread's two largest
//     (value desc, index asc) keys; the target's logprob.
//  2. (k > 0) the k-th largest of those 2 * 512 thread keys bounds the top k from below (at least k tokens
//     reach it): every key at or above it goes to a shared list (about k of them on real or random logits),
//     which is sorted in shared memory; its first k entries are the answer (sampler_candidates.cuh).
// A row whose list overflows (thousands of tied logits) takes the exact radix select instead (the previous
// design: up to 8 more reads of the row, with contended shared atomics; correct but slow).
// Ties: keys are unique, lower index first among equal values, as the CPU backend orders them.
#include <climits>

#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/radix_select.cuh"
#include "backend/cuda/sampler_candidates.cuh"

namespace nanovllm::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kCandidates = 4096;  // >= 2 * kThreads (the thread-top scratch) and >= kMaxLogprobsK
constexpr int kUnroll = 4;         // 16-byte loads in flight per thread in the streaming passes

// The exact fallback: radix select of the take-th largest key, then the keys above it ranked.
__device__ void top_k_by_radix_select(const float* row, int vocab, int k, int take, float lse, int r,
                                      RadixSelectShared& select, uint64_t* picked, unsigned* picked_count, int* top_ids,
                                      float* top_logprobs) {
  const uint64_t threshold = radix_select_by_weight(
      [&](auto&& f) {
        for (int i = threadIdx.x; i < vocab; i += kThreads) f(order_key(row[i], i), 1ull);
      },
      static_cast<unsigned long long>(take), select);
  if (threadIdx.x == 0) *picked_count = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t key = order_key(row[i], i);
    if (key >= threshold) {
      const unsigned slot = atomicAdd(picked_count, 1u);
      if (slot < kMaxLogprobsK) picked[slot] = key;
    }
  }
  __syncthreads();
  const int count = min(static_cast<int>(*picked_count), take);
  for (int j = threadIdx.x; j < k; j += kThreads) {
    if (j >= count) continue;  // written by the caller
    const uint64_t key = picked[j];
    int rank = 0;
    for (int o = 0; o < count; ++o) rank += picked[o] > key;
    const int index = index_of_key(key);
    top_ids[static_cast<int64_t>(r) * k + rank] = index;
    top_logprobs[static_cast<int64_t>(r) * k + rank] = row[index] - lse;
  }
}

__global__ void __launch_bounds__(kThreads)
    logprobs_kernel(const float* __restrict__ logits, const int* __restrict__ targets, int vocab, int k,
                    float* target_logprob, int* top_ids, float* top_logprobs) {
  __shared__ float scratch[32];
  __shared__ uint64_t candidates[kCandidates];
  __shared__ unsigned candidate_count;
  __shared__ RadixSelectShared select;
  __shared__ unsigned picked_count;
  const int r = blockIdx.x;
  const float* row = logits + static_cast<int64_t>(r) * vocab;

  // Pass 1: online max / sum of exp per thread (merged across the block), and the thread's top two keys.
  float m = -INFINITY, sum = 0.0f;
  TopTwoKeys tops;
  for_each_logit<kUnroll>(row, vocab, [&](int i, float x, bool valid) {
    if (!valid) return;
    if (k > 0) tops.add(order_key(x, i));
    if (x == -INFINITY) return;  // masked token: contributes nothing
    if (x > m) {
      sum = sum * expf(m - x) + 1.0f;
      m = x;
    } else {
      sum += expf(x - m);
    }
  });
  const float row_max = block_max(m, scratch);
  const float total = block_sum(m == -INFINITY ? 0.0f : sum * expf(m - row_max), scratch);
  const float lse = row_max + logf(total);

  if (threadIdx.x == 0) {
    const int target = targets[r];
    target_logprob[r] = (target >= 0 && target < vocab) ? row[target] - lse : NAN;
  }
  if (k <= 0) return;

  const int take = min(k, vocab);
  for (int j = take + static_cast<int>(threadIdx.x); j < k; j += kThreads) {  // fewer tokens than k
    top_ids[static_cast<int64_t>(r) * k + j] = -1;
    top_logprobs[static_cast<int64_t>(r) * k + j] = -INFINITY;
  }

  // Pass 2: every key at or above the bound (at least `take` of them) into the shared list.
  const uint64_t bound = kth_largest_of_thread_tops(tops, take, candidates);
  if (threadIdx.x == 0) candidate_count = 0;
  __syncthreads();
  for_each_logit<kUnroll>(row, vocab, [&](int i, float x, bool valid) {
    const uint64_t key = order_key(x, i);
    append_candidate(valid && key >= bound, key, candidates, kCandidates, &candidate_count);
  });
  __syncthreads();
  const int count = static_cast<int>(candidate_count);
  if (count > kCandidates) {
    top_k_by_radix_select(row, vocab, k, take, lse, r, select, candidates, &picked_count, top_ids, top_logprobs);
    return;
  }
  sort_candidates(candidates, count);
  for (int j = threadIdx.x; j < take; j += kThreads) {
    const int index = index_of_key(candidates[j]);
    top_ids[static_cast<int64_t>(r) * k + j] = index;
    top_logprobs[static_cast<int64_t>(r) * k + j] = row[index] - lse;
  }
}

}  // namespace

void launch_logprobs(const float* logits, const int* targets, int rows, int vocab, int k, float* target_logprob,
                     int* top_ids, float* top_logprobs, cudaStream_t stream) {
  if (rows == 0) return;
  if (k > kMaxLogprobsK) {
    throw EngineError("logprobs: k = " + std::to_string(k) + " exceeds " + std::to_string(kMaxLogprobsK));
  }
  logprobs_kernel<<<rows, kThreads, 0, stream>>>(logits, targets, vocab, k, target_logprob, top_ids, top_logprobs);
  NANOVLLM_CHECK_LAUNCH("logprobs_kernel");
}

}  // namespace nanovllm::cuda
