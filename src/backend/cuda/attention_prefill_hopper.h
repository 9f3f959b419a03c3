#pragma once
// The sm_90a prefill attention kernel (wgmma), private to the attention launchers.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention.h"

namespace nanovllm::cuda::attention_detail {

// The warp-specialised kernel's TMA box: 64 keys of one block (so blocks of at least 64 keys) x 64 values.
inline constexpr int kTmaBoxKeys = 64;

// Same contract as paged_attention_prefill (arguments already validated, at least one row); `kernel` is one of
// the wgmma kernels.
void launch_hopper_prefill(const PagedAttentionArgs& a, cudaStream_t stream, PrefillKernel kernel);

// The FP8-products kernel's tiles: kFp8TileKeys keys of one KV head, K as [key][128 codes] and V transposed as
// [value][128 keys], each in the 128-byte-swizzled layout (row r's 16-byte chunk c at c ^ (r % 8)). In the V tile
// the keys are permuted within each 16: MMA k index k holds key fp8_pv_key_at(k), so that the S accumulators a
// thread holds are, as they stand, its part of P's E4M3 A fragment.
inline constexpr int kFp8TileKeys = 128;
__host__ __device__ constexpr int fp8_pv_key_at(int k) {
  return (k & ~15) + 2 * ((k >> 2) & 3) + (k & 1) + 8 * ((k >> 1) & 1);
}

// The FP8-products kernel over packed tiles (tiles_per_seq per sequence and KV head, sequence-major).
void launch_hopper_fp8_mma_prefill(const PagedAttentionArgs& a, const uint8_t* k_tiles, const uint8_t* v_tiles,
                                   int tiles_per_seq, cudaStream_t stream);

// An FP8 cache's prefill with the products in FP8: packs the launch's codes into `shadow`, then the kernel above;
// throws EngineError naming what is missing where it cannot run.
void launch_fp8_mma_prefill(const PagedAttentionArgs& a, void* shadow, size_t shadow_bytes, cudaStream_t stream);

// An FP8-cache prefill through a bf16 shadow of its blocks (attention_prefill_fp8_shadow.cu); throws EngineError
// naming what is missing where it cannot run.
void launch_fp8_shadow_prefill(const PagedAttentionArgs& a, void* shadow, size_t shadow_bytes, cudaStream_t stream);

}  // namespace nanovllm::cuda::attention_detail
