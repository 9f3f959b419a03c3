#pragma once
// Shared by the decode and prefill attention kernels: argument checks, CUDA call checks, 16-byte bf16 vectors and
// the cache's eight-value loads (bf16 or FP8).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/attention.h"
#include "backend/cuda/fp8_vec.cuh"
#include "common/error.h"

namespace nanovllm::cuda::attention_detail {

inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw EngineError(std::string(what) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
}

// Lets `kernel` launch with `bytes` of dynamic shared memory (above 48 KiB it must be asked for). The setting
// belongs to the current device, so it is made before every launch that needs it rather than once a process:
// under tensor parallelism each rank's device needs its own. It is not a stream operation, so it may run while a
// graph is being captured (decode graphs capture the first launches of the tensor-core decode kernels).
template <typename Kernel>
void allow_dynamic_smem(Kernel kernel, size_t bytes, const char* who) {
  check_cuda(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
      (std::string(who) + ": cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(bytes) + ")").c_str());
}

inline int log2_exact(int x) {
  int s = 0;
  while ((1 << s) < x) ++s;
  return s;
}

// Everything the kernels assume about the arguments, checked on the host before any launch.
inline void validate_args(const PagedAttentionArgs& a, const char* who) {
  const std::string w(who);
  if (a.head_dim != 64 && a.head_dim != 128)
    throw EngineError(w + ": head_dim " + std::to_string(a.head_dim) + " is not supported (64 or 128)");
  if (a.block_size < 16 || a.block_size > 256 || (a.block_size & (a.block_size - 1)) != 0)
    throw EngineError(w + ": block_size " + std::to_string(a.block_size) + " must be a power of two in 16..256");
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0)
    throw EngineError(w + ": num_heads " + std::to_string(a.num_heads) + " is not a multiple of num_kv_heads " +
                      std::to_string(a.num_kv_heads));
  if (a.num_seqs < 0 || a.max_seqlen_q < 0 || a.max_seqlen_k < 0 || a.max_blocks_per_seq < 0)
    throw EngineError(w + ": negative batch bound");
  if (static_cast<int64_t>(a.max_blocks_per_seq) * a.block_size < a.max_seqlen_k)
    throw EngineError(w + ": max_seqlen_k " + std::to_string(a.max_seqlen_k) + " exceeds max_blocks_per_seq " +
                      std::to_string(a.max_blocks_per_seq) + " x block_size " + std::to_string(a.block_size));
  if (a.num_seqs > 0 &&
      (!a.q || !a.k_cache || !a.v_cache || !a.cu_seqlens_q || !a.seq_lens_k || !a.block_tables || !a.out))
    throw EngineError(w + ": null pointer argument");
  const auto misaligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) != 0; };
  if (misaligned(a.q) || misaligned(a.k_cache) || misaligned(a.v_cache) || misaligned(a.out))
    throw EngineError(w + ": q, k_cache, v_cache and out must be 16-byte aligned");
  const auto usable = [](float s) { return std::isfinite(s) && s > 0.0f; };
  if (a.fp8_cache && !(usable(a.k_scale) && usable(a.v_scale)))
    throw EngineError(w + ": FP8 cache scales must be positive and finite, got " + std::to_string(a.k_scale) + " and " +
                      std::to_string(a.v_scale));
}

// Eight bf16 values: one 16-byte load or store.
__device__ __forceinline__ void bf16x8_to_float(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Read-only, through the non-coherent path: the cache is written by an earlier kernel only.
__device__ __forceinline__ uint4 load_16b(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint2 load_8b(const void* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }

// kVec cached values of a lane in one load: eight bf16 (16 bytes), or eight or sixteen FP8 codes (8 or 16
// bytes). Element offsets are the same for every kind; only the byte stride differs.
template <bool kFp8, int kVec>
struct CacheVec;

template <>
struct CacheVec<false, 8> {
  using Raw = uint4;
  static __device__ __forceinline__ Raw load(const void* base, size_t element) {
    return load_16b(static_cast<const __nv_bfloat16*>(base) + element);
  }
  static __device__ __forceinline__ Raw zero() { return make_uint4(0, 0, 0, 0); }
  static __device__ __forceinline__ void to_float(const Raw& r, float (&f)[8]) { bf16x8_to_float(r, f); }
};

template <>
struct CacheVec<true, 8> {
  using Raw = uint2;
  static __device__ __forceinline__ Raw load(const void* base, size_t element) {
    return load_8b(static_cast<const uint8_t*>(base) + element);
  }
  static __device__ __forceinline__ Raw zero() { return make_uint2(0, 0); }
  static __device__ __forceinline__ void to_float(const Raw& r, float (&f)[8]) { fp8x8_to_float(r, f); }
  static __device__ __forceinline__ void to_half2(const Raw& r, __half2 (&h)[4]) {
    fp8x4_to_half2(r.x, h[0], h[1]);
    fp8x4_to_half2(r.y, h[2], h[3]);
  }
};

template <>
struct CacheVec<true, 16> {
  using Raw = uint4;
  static __device__ __forceinline__ Raw load(const void* base, size_t element) {
    return load_16b(static_cast<const uint8_t*>(base) + element);
  }
  static __device__ __forceinline__ Raw zero() { return make_uint4(0, 0, 0, 0); }
  static __device__ __forceinline__ void to_float(const Raw& r, float (&f)[16]) {
    fp8x8_to_float(make_uint2(r.x, r.y), reinterpret_cast<float(&)[8]>(f[0]));
    fp8x8_to_float(make_uint2(r.z, r.w), reinterpret_cast<float(&)[8]>(f[8]));
  }
  static __device__ __forceinline__ void to_half2(const Raw& r, __half2 (&h)[8]) {
    fp8x4_to_half2(r.x, h[0], h[1]);
    fp8x4_to_half2(r.y, h[2], h[3]);
    fp8x4_to_half2(r.z, h[4], h[5]);
    fp8x4_to_half2(r.w, h[6], h[7]);
  }
};

constexpr float kLog2e = 1.4426950408889634f;

}  // namespace nanovllm::cuda::attention_detail
