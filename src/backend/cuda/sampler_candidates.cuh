#pragma once
// Block-wide helpers for "the few largest keys of one row" (the sampler's top-k / top-p rows and the
// logprobs top-k), shared by sampler.cu and logprobs.cu. The idea: a cheap lower bound on the keys that can
// matter (the k-th largest of every thread's two largest keys: 2 * blockDim distinct elements, so at least k
// elements reach it), one streaming pass that appends every key at or above the bound to a shared list
// (warp-aggregated: one shared atomic per warp), then a bitonic sort of that short list in shared memory.
// On random or real logits the list holds about k keys; when it overflows the callers fall back to the
// exact radix select of radix_select.cuh (slow, but only on degenerate rows such as thousands of ties).
#include <cstdint>

#include "backend/cuda/radix_select.cuh"

namespace nanovllm::cuda {

// The float an order_key was made from (order_key's bit transform undone).
__device__ __forceinline__ float value_of_key(uint64_t key) {
  const uint32_t high = static_cast<uint32_t>(key >> 32);
  return __uint_as_float((high & 0x80000000u) ? (high & 0x7FFFFFFFu) : ~high);
}

// The smallest key of any element whose value is at least v (index bits all "largest index").
__device__ __forceinline__ uint64_t lowest_key_of_value(float v) { return order_key(v, 0) & 0xFFFFFFFF00000000ull; }

// Keeps the two largest keys one thread has seen (0 = none; every real key is > 0).
struct TopTwoKeys {
  uint64_t first = 0, second = 0;
  __device__ __forceinline__ void add(uint64_t key) {
    if (key > first) {
      second = first;
      first = key;
    } else if (key > second) {
      second = key;
    }
  }
};

__device__ __forceinline__ int next_power_of_two(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Sorts keys[0, n) descending; n is a power of two. All threads of the block call it; it starts and ends
// with a barrier, so the caller may write keys right before and read them right after.
__device__ inline void sort_keys_descending(uint64_t* keys, int n) {
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
        const int lo = 2 * i - (i & (stride - 1));
        const int hi = lo + stride;
        const bool descending = (lo & size) == 0;  // the final merge (size == n) is descending
        const uint64_t a = keys[lo], b = keys[hi];
        if ((a < b) == descending) {
          keys[lo] = b;
          keys[hi] = a;
        }
      }
    }
  }
  __syncthreads();
}

// Sorts every thread's two largest keys, descending, into keys[0, 2 * blockDim.x) (a power of two).
// Any j of them are j distinct elements of the row.
__device__ inline void sort_thread_tops(const TopTwoKeys& mine, uint64_t* keys) {
  __syncthreads();  // keys may still be read by the caller's previous use
  keys[2 * threadIdx.x] = mine.first;
  keys[2 * threadIdx.x + 1] = mine.second;
  sort_keys_descending(keys, 2 * blockDim.x);
}

// The k-th largest (1-based, k <= 2 * blockDim.x) of every thread's two largest keys, 0 when fewer than k
// exist. At least k elements of the row have a key >= the result. Uses keys[0, 2 * blockDim.x) as scratch.
__device__ inline uint64_t kth_largest_of_thread_tops(const TopTwoKeys& mine, int k, uint64_t* keys) {
  sort_thread_tops(mine, keys);
  const uint64_t kth = keys[k - 1];
  __syncthreads();  // every thread has read it before keys is reused
  return kth;
}

// Appends `key` (when `want`) to list[0, capacity) at a slot from *count; *count still grows past capacity,
// which tells the caller the list overflowed. All 32 lanes of the warp must call it together.
__device__ __forceinline__ void append_candidate(bool want, uint64_t key, uint64_t* list, int capacity,
                                                 unsigned* count) {
  const unsigned lane = threadIdx.x & 31u;
  const unsigned ballot = __ballot_sync(0xffffffffu, want);
  if (ballot == 0) return;
  unsigned base = 0;
  if (lane == 0) base = atomicAdd(count, static_cast<unsigned>(__popc(ballot)));
  base = __shfl_sync(0xffffffffu, base, 0);
  if (want) {
    const unsigned slot = base + static_cast<unsigned>(__popc(ballot & ((1u << lane) - 1u)));
    if (slot < static_cast<unsigned>(capacity)) list[slot] = key;
  }
}

// Pads list[count, next power of two) with 0 (smaller than every real key) and sorts it descending.
// Returns the padded length.
__device__ inline int sort_candidates(uint64_t* list, int count) {
  const int n = next_power_of_two(count < 2 ? 2 : count);
  for (int i = count + static_cast<int>(threadIdx.x); i < n; i += blockDim.x) list[i] = 0;
  sort_keys_descending(list, n);
  return n;
}

// Streams row[0, n) through the block: f(i, x, valid) for each element this thread owns, with 16-byte loads
// when the row allows (kUnroll of them in flight per thread: one block per row must keep enough bytes in
// flight on its own at R = 1). The loop is warp-uniform: every lane of a warp makes the same calls, padding
// ones with valid = false, so f may use warp collectives. Each element goes to exactly one thread.
template <int kUnroll, class F>
__device__ __forceinline__ void for_each_logit(const float* row, int n, F f) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp_base = static_cast<int>(threadIdx.x & ~31u);
  const int threads = static_cast<int>(blockDim.x);
  if (n % 4 == 0 && (reinterpret_cast<uintptr_t>(row) & 15u) == 0) {
    const int n4 = n / 4;
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int base = warp_base; base < n4; base += kUnroll * threads) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = base + u * threads + lane;
        v[u] = j < n4 ? __ldg(row4 + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = base + u * threads + lane;
        const bool valid = j < n4;
        f(4 * j, v[u].x, valid);
        f(4 * j + 1, v[u].y, valid);
        f(4 * j + 2, v[u].z, valid);
        f(4 * j + 3, v[u].w, valid);
      }
    }
  } else {
    for (int base = warp_base; base < n; base += 4 * kUnroll * threads) {
      float x[4 * kUnroll];
#pragma unroll
      for (int u = 0; u < 4 * kUnroll; ++u) {
        const int i = base + u * threads + lane;
        x[u] = i < n ? __ldg(row + i) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < 4 * kUnroll; ++u) {
        const int i = base + u * threads + lane;
        f(i, x[u], i < n);
      }
    }
  }
}

__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace nanovllm::cuda
