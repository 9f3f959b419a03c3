// FP8-cache prefill through a bf16 shadow: the launch's cached blocks are decoded once into bf16 (each code's value
// exactly, positions past a sequence's keys zero), laid out as num_seqs x ceil(max_seqlen_k / block_size) blocks
// with a block table of their own, and the warp-specialised kernel (TMA copies of bf16 boxes) runs on them with
// k_scale folded into the softmax scale and v_scale into the output. The decode is ~1% of the attention it feeds
// for long prompts (a 16k-token chunk of a 30k-token prompt: 61 MB of codes read, 123 MB written, ~2.9 TFLOP),
// while the FP8 kernels convert every K/V tile in shared memory for every query tile that reads it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_prefill_hopper.h"
#include "backend/cuda/attention_prefill_tile.cuh"
#include "backend/cuda/fp8_vec.cuh"
#include "common/error.h"

namespace nanovllm::cuda {
namespace attention_detail {
namespace {

constexpr int kShadowThreads = 256;
constexpr int kCodesPerLoad = 16;  // one 16-byte load, two 16-byte stores
constexpr int kPartsPerBlock = 4;  // CTAs a shadow block: a single 32k-token sequence still fills every SM

struct ShadowLayout {
  int blocks_per_seq = 0;
  size_t block_elems = 0;  // block_size x nkv x d
  size_t v_offset = 0, table_offset = 0, bytes = 0;
};

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

ShadowLayout shadow_layout(const PagedAttentionArgs& a) {
  ShadowLayout l;
  l.blocks_per_seq = (a.max_seqlen_k + a.block_size - 1) / a.block_size;
  l.block_elems = static_cast<size_t>(a.block_size) * a.num_kv_heads * a.head_dim;
  const size_t blocks = static_cast<size_t>(a.num_seqs) * l.blocks_per_seq;
  const size_t cache_bytes = align256(blocks * l.block_elems * sizeof(__nv_bfloat16));
  l.v_offset = cache_bytes;
  l.table_offset = 2 * cache_bytes;
  l.bytes = l.table_offset + align256(blocks * sizeof(int));
  return l;
}

// kPartsPerBlock CTAs per shadow block (grid x: the block's index in its sequence, y: the sequence, z: the part of
// the block's elements). Part 0 writes the block's entry of the shadow's block table; each part its share of the
// block's K and V: the codes of the cached block as bf16 where the position holds one of the sequence's keys, zero
// past them (and for blocks wholly past them: the prefill kernel may load those boxes and mask them, and zero
// keeps a NaN code out of P V).
__global__ void __launch_bounds__(kShadowThreads)
    fp8_cache_to_bf16_shadow_kernel(const uint8_t* __restrict__ k_codes, const uint8_t* __restrict__ v_codes,
                                    const int* __restrict__ block_tables, const int* __restrict__ seq_lens_k,
                                    int max_blocks_per_seq, int blocks_per_seq, int slot_elems, size_t block_elems,
                                    __nv_bfloat16* __restrict__ k_shadow, __nv_bfloat16* __restrict__ v_shadow,
                                    int* __restrict__ shadow_tables) {
  const int j = static_cast<int>(blockIdx.x), s = static_cast<int>(blockIdx.y);
  const int shadow_block = s * blocks_per_seq + j;
  if (threadIdx.x == 0 && blockIdx.z == 0) shadow_tables[shadow_block] = shadow_block;
  const int block_size = static_cast<int>(block_elems / static_cast<size_t>(slot_elems));
  const int first_key = j * block_size, seq_len = seq_lens_k[s];
  const size_t source = first_key < seq_len ? static_cast<size_t>(block_tables[s * max_blocks_per_seq + j]) : 0;
  const size_t dst = static_cast<size_t>(shadow_block) * block_elems, src = source * block_elems;
  const size_t part_elems = block_elems / kPartsPerBlock, part_end = (blockIdx.z + 1) * part_elems;
  for (size_t i = blockIdx.z * part_elems + threadIdx.x * static_cast<size_t>(kCodesPerLoad); i < part_end;
       i += static_cast<size_t>(kShadowThreads) * kCodesPerLoad) {
    uint4 k_lo = make_uint4(0, 0, 0, 0), k_hi = k_lo, v_lo = k_lo, v_hi = k_lo;
    if (first_key + static_cast<int>(i / static_cast<size_t>(slot_elems)) < seq_len) {
      const uint4 kc = *reinterpret_cast<const uint4*>(k_codes + src + i);
      const uint4 vc = *reinterpret_cast<const uint4*>(v_codes + src + i);
      k_lo = fp8x8_to_bf16x8(make_uint2(kc.x, kc.y));
      k_hi = fp8x8_to_bf16x8(make_uint2(kc.z, kc.w));
      v_lo = fp8x8_to_bf16x8(make_uint2(vc.x, vc.y));
      v_hi = fp8x8_to_bf16x8(make_uint2(vc.z, vc.w));
    }
    auto* k_out = reinterpret_cast<uint4*>(k_shadow + dst + i);
    auto* v_out = reinterpret_cast<uint4*>(v_shadow + dst + i);
    k_out[0] = k_lo;
    k_out[1] = k_hi;
    v_out[0] = v_lo;
    v_out[1] = v_hi;
  }
}

// What the shadow path needs beyond enough bytes, or "" (the warp-specialised kernel's own needs, an FP8 cache).
std::string shadow_unsupported(const PagedAttentionArgs& a) {
  if (!a.fp8_cache) return "an FP8 cache";
  if (a.head_dim != 128) return "head_dim 128 (got " + std::to_string(a.head_dim) + ")";
  if (a.block_size < kTmaBoxKeys)
    return "blocks of at least " + std::to_string(kTmaBoxKeys) + " keys (got " + std::to_string(a.block_size) + ")";
  return "";
}

}  // namespace

void launch_fp8_shadow_prefill(const PagedAttentionArgs& a, void* shadow, size_t shadow_bytes, cudaStream_t stream) {
  const std::string missing = shadow_unsupported(a);
  if (!missing.empty()) throw EngineError("paged_attention_prefill: the FP8 shadow path needs " + missing);
  const ShadowLayout l = shadow_layout(a);
  if (shadow == nullptr || shadow_bytes < l.bytes)
    throw EngineError("paged_attention_prefill: the FP8 shadow path needs " + std::to_string(l.bytes) +
                      " bytes of shadow, got " + std::to_string(shadow == nullptr ? 0 : shadow_bytes));
  auto* base = static_cast<unsigned char*>(shadow);
  auto* k_shadow = reinterpret_cast<__nv_bfloat16*>(base);
  auto* v_shadow = reinterpret_cast<__nv_bfloat16*>(base + l.v_offset);
  auto* tables = reinterpret_cast<int*>(base + l.table_offset);
  // block_elems is a multiple of 64 x 128 (blocks of 64+ keys, d = 128): parts of whole 16-code loads.
  const dim3 grid(static_cast<unsigned>(l.blocks_per_seq), static_cast<unsigned>(a.num_seqs), kPartsPerBlock);
  fp8_cache_to_bf16_shadow_kernel<<<grid, kShadowThreads, 0, stream>>>(
      static_cast<const uint8_t*>(a.k_cache), static_cast<const uint8_t*>(a.v_cache), a.block_tables, a.seq_lens_k,
      a.max_blocks_per_seq, l.blocks_per_seq, a.num_kv_heads * a.head_dim, l.block_elems, k_shadow, v_shadow, tables);
  check_cuda(cudaGetLastError(), "paged_attention_prefill: the FP8 shadow's decode kernel");
  PagedAttentionArgs b = a;
  b.k_cache = k_shadow;
  b.v_cache = v_shadow;
  b.block_tables = tables;
  b.max_blocks_per_seq = l.blocks_per_seq;
  b.fp8_cache = false;
  b.scale = a.scale * a.k_scale;
  b.out_scale = a.out_scale * a.v_scale;
  b.k_scale = b.v_scale = 1.0f;
  launch_hopper_prefill(b, stream, PrefillKernel::kWgmmaWarpSpecialized);
}

}  // namespace attention_detail

size_t fp8_prefill_shadow_bytes(const PagedAttentionArgs& args) { return attention_detail::shadow_layout(args).bytes; }

bool fp8_prefill_shadow_applies(const PagedAttentionArgs& args, PrefillKernel kernel) {
  if (!attention_detail::shadow_unsupported(args).empty()) return false;
  if (kernel == PrefillKernel::kWgmmaFp8Shadow) return true;
  return kernel == PrefillKernel::kWgmma &&
         attention_detail::prefill_tile_order(args) == attention_detail::PrefillTileOrder::kPerSequence;
}

}  // namespace nanovllm::cuda
