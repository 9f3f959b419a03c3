// FP8-cache prefill through a bf16 shadow: the launch's cached blocks are decoded once into bf16 (each code's value
// exactly, positions past a sequence's keys zero), laid out as num_seqs x ceil(max_seqlen_k / block_size) blocks
// with a block table of their own, and the warp-specialised kernel (TMA copies of bf16 boxes) runs on them with
// k_scale folded into the softmax scale and v_scale into the output. The decode is ~1% of the attention it feeds
// for long prompts (computed for a 16k-token chunk of a 30k-token prompt: 61 MB of codes read, 123 MB written,
// ~2.9 TFLOP),
// while the FP8 kernels convert every K/V tile in shared memory for every query tile that reads it.
// For the FP8-products kernel the shadow holds the launch's codes packed instead: per (sequence, KV head), tiles of
// 128 keys, K as it is and V transposed, each already in the swizzled layout the kernel's MMAs read.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_prefill_hopper.h"
#include "backend/cuda/attention_prefill_tile.cuh"
#include "backend/cuda/attention_wgmma.cuh"
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

// The FP8-products kernel's packed tiles: num_seqs x nkv x ceil(max_seqlen_k / kFp8TileKeys) tiles of K, then as
// many of transposed V, kFp8TileKeys x 128 codes each.
struct PackedLayout {
  int tiles_per_seq = 0;
  size_t tile_bytes = static_cast<size_t>(kFp8TileKeys) * 128;
  size_t v_offset = 0, bytes = 0;
};

PackedLayout packed_layout(const PagedAttentionArgs& a) {
  PackedLayout l;
  l.tiles_per_seq = (a.max_seqlen_k + kFp8TileKeys - 1) / kFp8TileKeys;
  l.v_offset = align256(static_cast<size_t>(a.num_seqs) * a.num_kv_heads * l.tiles_per_seq * l.tile_bytes);
  l.bytes = 2 * l.v_offset;
  return l;
}

constexpr int kPackThreads = 256;
constexpr int kPackRowStride = 132;  // bytes a V row takes in shared memory: rows 33 words apart spread the banks

// One CTA a tile (grid x: the tile, y: the sequence, z: the KV head): the tile's K codes swizzled as they are, its V
// codes transposed through shared memory (fp8_pv_key_at's key order). Keys past the sequence's end are zero.
__global__ void __launch_bounds__(kPackThreads)
    pack_fp8_tiles_kernel(const uint8_t* __restrict__ k_codes, const uint8_t* __restrict__ v_codes,
                          const int* __restrict__ block_tables, const int* __restrict__ seq_lens_k,
                          int max_blocks_per_seq, int block_size, int num_kv_heads, int tiles_per_seq,
                          uint8_t* __restrict__ k_tiles, uint8_t* __restrict__ v_tiles) {
  constexpr int kChunks = 128 / 16;  // 16-byte chunks a row
  __shared__ __align__(16) uint8_t v_rows[kFp8TileKeys * kPackRowStride];
  const int j = static_cast<int>(blockIdx.x), s = static_cast<int>(blockIdx.y), h = static_cast<int>(blockIdx.z);
  const int seq_len = seq_lens_k[s];
  const int* table = block_tables + static_cast<size_t>(s) * max_blocks_per_seq;
  const int shift = 31 - __clz(block_size);
  const size_t tile = ((static_cast<size_t>(s) * num_kv_heads + h) * tiles_per_seq + j) * kFp8TileKeys * 128;
  for (int i = threadIdx.x; i < kFp8TileKeys * kChunks; i += kPackThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const int key = j * kFp8TileKeys + r;
    uint4 k = make_uint4(0, 0, 0, 0), v = k;
    if (key < seq_len) {
      const size_t slot = (static_cast<size_t>(__ldg(table + (key >> shift))) << shift) | (key & (block_size - 1));
      const size_t src = (slot * num_kv_heads + h) * 128 + c * 16;
      k = *reinterpret_cast<const uint4*>(k_codes + src);
      v = *reinterpret_cast<const uint4*>(v_codes + src);
    }
    *reinterpret_cast<uint4*>(k_tiles + tile + swizzled_byte_offset(r, c)) = k;
    auto* row = reinterpret_cast<uint32_t*>(v_rows + r * kPackRowStride + c * 16);
    row[0] = v.x, row[1] = v.y, row[2] = v.z, row[3] = v.w;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 128 * kChunks; i += kPackThreads) {
    const int d = i / kChunks, c = i % kChunks;  // value d's chunk c: MMA k indices 16c .. 16c + 15
    uint32_t words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      uint32_t word = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        word |= static_cast<uint32_t>(v_rows[fp8_pv_key_at(16 * c + 4 * w + b) * kPackRowStride + d]) << (8 * b);
      words[w] = word;
    }
    *reinterpret_cast<uint4*>(v_tiles + tile + swizzled_byte_offset(d, c)) =
        make_uint4(words[0], words[1], words[2], words[3]);
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

void launch_fp8_mma_prefill(const PagedAttentionArgs& a, void* shadow, size_t shadow_bytes, cudaStream_t stream) {
  if (!a.fp8_cache || a.head_dim != 128)
    throw EngineError("paged_attention_prefill: the FP8-products path needs an FP8 cache and head_dim 128 (got " +
                      std::string(a.fp8_cache ? "an FP8" : "a bf16") + " cache, head_dim " +
                      std::to_string(a.head_dim) + ")");
  const PackedLayout l = packed_layout(a);
  if (shadow == nullptr || shadow_bytes < l.bytes)
    throw EngineError("paged_attention_prefill: the FP8-products path needs " + std::to_string(l.bytes) +
                      " bytes of shadow, got " + std::to_string(shadow == nullptr ? 0 : shadow_bytes));
  auto* k_tiles = static_cast<uint8_t*>(shadow);
  uint8_t* v_tiles = k_tiles + l.v_offset;
  const dim3 grid(static_cast<unsigned>(l.tiles_per_seq), static_cast<unsigned>(a.num_seqs),
                  static_cast<unsigned>(a.num_kv_heads));
  pack_fp8_tiles_kernel<<<grid, kPackThreads, 0, stream>>>(
      static_cast<const uint8_t*>(a.k_cache), static_cast<const uint8_t*>(a.v_cache), a.block_tables, a.seq_lens_k,
      a.max_blocks_per_seq, a.block_size, a.num_kv_heads, l.tiles_per_seq, k_tiles, v_tiles);
  check_cuda(cudaGetLastError(), "paged_attention_prefill: the FP8 tiles' packing kernel");
  launch_hopper_fp8_mma_prefill(a, k_tiles, v_tiles, l.tiles_per_seq, stream);
}

}  // namespace attention_detail

size_t fp8_prefill_shadow_bytes(const PagedAttentionArgs& args) {
  return std::max(attention_detail::shadow_layout(args).bytes, attention_detail::packed_layout(args).bytes);
}

bool fp8_prefill_shadow_applies(const PagedAttentionArgs& args, PrefillKernel kernel) {
  if (kernel == PrefillKernel::kWgmmaFp8Mma) return args.fp8_cache && args.head_dim == 128;
  if (!attention_detail::shadow_unsupported(args).empty()) return false;
  if (kernel == PrefillKernel::kWgmmaFp8Shadow) return true;
  return kernel == PrefillKernel::kWgmma &&
         attention_detail::prefill_tile_order(args) == attention_detail::PrefillTileOrder::kPerSequence;
}

bool fp8_prefill_takes_shadow(const PagedAttentionArgs& args, PrefillKernel kernel, const void* shadow,
                              size_t shadow_bytes) {
  return shadow != nullptr && fp8_prefill_shadow_applies(args, kernel) &&
         shadow_bytes >= fp8_prefill_shadow_bytes(args);
}

}  // namespace nanovllm::cuda
