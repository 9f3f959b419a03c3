#pragma once
// Block-wide radix select over unique 64-bit keys, shared by the sampler (top-k / top-p thresholds) and the
// logprobs top-k. Keys order elements by value descending then index ascending (see order_key), so every
// key is unique and "the k largest" is exact even with tied values. Each pass reads the row once and
// builds a 256-bucket histogram of the next 8 key bits (counts and integer weights, so sums are exact and
// the result does not depend on thread timing); it stops early once the chosen bucket holds exactly the
// elements it needs.
#include <cstdint>

namespace nanovllm::cuda {

// Larger float -> larger key; equal floats -> lower index larger key. NaN sorts like a very large value, so
// callers exclude NaN themselves.
__device__ __forceinline__ uint64_t order_key(float value, int index) {
  uint32_t bits = __float_as_uint(value);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(bits) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(index));
}

__device__ __forceinline__ int index_of_key(uint64_t key) {
  return static_cast<int>(0xFFFFFFFFu - static_cast<uint32_t>(key));
}

struct RadixSelectShared {
  unsigned long long weight[256];
  unsigned count[256];
  uint64_t prefix;
  unsigned long long weight_above;
  unsigned chosen_count;
  int done;
};

// Returns the largest key K such that the total weight of elements with key >= K reaches `target`
// (target >= 1; clamped to the total weight). `visit(f)` must call f(key, weight) for every candidate
// element the calling thread owns (each element by exactly one thread); it is called once per pass. With
// unit weights this is "the key of the target-th largest element". All threads of the block must call it.
template <class Visit>
__device__ uint64_t radix_select_by_weight(Visit visit, unsigned long long target, RadixSelectShared& s) {
  if (threadIdx.x == 0) {
    s.prefix = 0;
    s.weight_above = 0;
    s.done = 0;
  }
  uint64_t mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) {
      s.weight[d] = 0;
      s.count[d] = 0;
    }
    __syncthreads();
    const uint64_t prefix = s.prefix;
    visit([&](uint64_t key, unsigned long long w) {
      if ((key & mask) == prefix) {
        const int digit = static_cast<int>((key >> shift) & 0xFF);
        atomicAdd(&s.count[digit], 1u);
        if (w) atomicAdd(&s.weight[digit], w);
      }
    });
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane L owns digits 255 - 8L ... 248 - 8L (descending), so lanes in order walk the keys downwards.
      const int lane = threadIdx.x;
      unsigned long long lane_weight = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) lane_weight += s.weight[255 - 8 * lane - j];
      unsigned long long inclusive = lane_weight;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const unsigned long long up = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += up;
      }
      const unsigned long long total = __shfl_sync(0xffffffffu, inclusive, 31);
      const unsigned long long above = s.weight_above;
      unsigned long long goal = target < 1 ? 1 : target;
      if (goal > above + total) goal = above + total;
      const unsigned hit = __ballot_sync(0xffffffffu, above + inclusive >= goal && lane_weight > 0);
      const int first = hit ? __ffs(hit) - 1 : 31;
      __syncwarp();  // every lane's read of s.weight_above happens before `first` overwrites it
      if (lane == first) {
        unsigned long long cum = above + inclusive - lane_weight;
        int chosen = 255 - 8 * lane - 7;
        for (int j = 0; j < 8; ++j) {
          const int d = 255 - 8 * lane - j;
          if (s.weight[d] > 0 && cum + s.weight[d] >= goal) {
            chosen = d;
            break;
          }
          cum += s.weight[d];
        }
        s.prefix = prefix | (static_cast<uint64_t>(chosen) << shift);
        s.weight_above = cum;
        s.chosen_count = s.count[chosen];
        // The bucket is settled when it holds one element, or (unit weights) exactly the ones still needed.
        s.done = s.count[chosen] == 1 || (s.weight[chosen] == s.count[chosen] && cum + s.weight[chosen] == goal);
      }
    }
    __syncthreads();
    mask |= 0xFFull << shift;
    if (s.done) break;
  }
  const uint64_t result = s.prefix;
  __syncthreads();  // s may be reused by the caller's next select
  return result;
}

}  // namespace nanovllm::cuda
