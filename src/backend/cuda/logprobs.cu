// Log-softmax of raw fp32 logits, one block per row: max and sum of exp in one pass (per-thread online
// rescaling), the target's logprob, and when k > 0 the k largest by an exact radix select over unique
// (value desc, index asc) keys, gathered into shared memory and ranked there (k is small).
#include <climits>

#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/radix_select.cuh"

namespace nanovllm::cuda {
namespace {

constexpr int kThreads = 512;

__global__ void __launch_bounds__(kThreads)
    logprobs_kernel(const float* __restrict__ logits, const int* __restrict__ targets, int vocab, int k,
                    float* target_logprob, int* top_ids, float* top_logprobs) {
  __shared__ float scratch[32];
  __shared__ RadixSelectShared select;
  __shared__ uint64_t picked[kMaxLogprobsK];
  __shared__ unsigned picked_count;
  const int r = blockIdx.x;
  const float* row = logits + static_cast<int64_t>(r) * vocab;

  // Online max / sum of exp per thread, then merged across the block.
  float m = -INFINITY, sum = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = row[i];
    if (x == -INFINITY) continue;  // masked token: contributes nothing
    if (x > m) {
      sum = sum * expf(m - x) + 1.0f;
      m = x;
    } else {
      sum += expf(x - m);
    }
  }
  const float row_max = block_max(m, scratch);
  const float total = block_sum(m == -INFINITY ? 0.0f : sum * expf(m - row_max), scratch);
  const float lse = row_max + logf(total);

  if (threadIdx.x == 0) {
    const int target = targets[r];
    target_logprob[r] = (target >= 0 && target < vocab) ? row[target] - lse : NAN;
  }
  if (k <= 0) return;

  const int take = min(k, vocab);
  const uint64_t threshold = radix_select_by_weight(
      [&](auto&& f) {
        for (int i = threadIdx.x; i < vocab; i += kThreads) f(order_key(row[i], i), 1ull);
      },
      static_cast<unsigned long long>(take), select);
  if (threadIdx.x == 0) picked_count = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t key = order_key(row[i], i);
    if (key >= threshold) {
      const unsigned slot = atomicAdd(&picked_count, 1u);
      if (slot < kMaxLogprobsK) picked[slot] = key;
    }
  }
  __syncthreads();
  const int count = min(static_cast<int>(picked_count), take);
  for (int j = threadIdx.x; j < k; j += kThreads) {
    if (j >= count) {  // fewer tokens than k
      top_ids[static_cast<int64_t>(r) * k + j] = -1;
      top_logprobs[static_cast<int64_t>(r) * k + j] = -INFINITY;
      continue;
    }
    const uint64_t key = picked[j];
    int rank = 0;
    for (int o = 0; o < count; ++o) rank += picked[o] > key;
    const int index = index_of_key(key);
    top_ids[static_cast<int64_t>(r) * k + rank] = index;
    top_logprobs[static_cast<int64_t>(r) * k + rank] = row[index] - lse;
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
