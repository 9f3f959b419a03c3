// Prefill attention (any q_len: full prompts, chunked prefill, prefix-cache hits) over the paged cache,
// FlashAttention-2 style on tensor cores (mma.sync m16n8k16 bf16 -> fp32; runs on sm_80 and sm_90).
//
// Grid (query tiles, query heads, sequences). One CTA of 4 warps owns 64 query rows of one head; each warp owns
// 16 rows. Keys come in tiles of 64 through the block table into shared memory with cp.async (two stages:
// tile j+1 loads while tile j is computed). S = Q K^T and O += P V are mma.sync; the softmax is an fp32 online
// softmax in registers; P is rounded to bf16 for the second product. Causal: query row i of a sequence sits at
// position seq_len - q_len + i, so key tiles past the CTA's last position are never loaded and only tiles that
// cross the diagonal (or the sequence end) are masked. Tiles are handed out last-first: the longest run first.
// An FP8 cache is loaded as codes and turned into the bf16 tiles in shared memory before each tile's MMAs;
// k_scale goes into the score scale and v_scale into the final normalisation.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/fp8_vec.cuh"
#include "backend/cuda/programmatic_launch.cuh"

namespace nanovllm::cuda {
namespace {

using namespace attention_detail;

constexpr int kPrefillThreads = 128;
constexpr int kPrefillRows = 64;  // query rows per CTA, 16 per warp
constexpr int kPrefillKeys = 64;  // keys per K/V tile

// bf16 cache: Q and two stages of (K, V) tiles. FP8 cache: Q, one stage of bf16 (K, V) tiles, and one of their
// FP8 codes as loaded (the next tile's codes arrive while the bf16 tiles are computed on).
template <int D, bool kFp8>
constexpr size_t prefill_smem_bytes() {
  if constexpr (kFp8)
    return static_cast<size_t>(kPrefillRows + 2 * kPrefillKeys) * D * sizeof(__nv_bfloat16) + 2 * kPrefillKeys * D;
  return static_cast<size_t>(kPrefillRows + 2 * 2 * kPrefillKeys) * D * sizeof(__nv_bfloat16);
}

// Shared-memory tiles are rows of D bf16 in 16-byte chunks; XOR-ing the chunk index with the row's low 3 bits
// puts the 8 rows an ldmatrix phase reads into 8 different bank groups.
template <int D>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

template <int D, bool kFp8>
__global__ void __launch_bounds__(kPrefillThreads) prefill_kernel(PagedAttentionArgs a) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kTileElems = kPrefillKeys * D;
  constexpr int kStages = kFp8 ? 1 : 2;  // of bf16 K/V tiles
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* sm_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* sm_k = sm_q + kPrefillRows * D;                                  // [kStages][kPrefillKeys * D]
  __nv_bfloat16* sm_v = sm_k + kStages * kTileElems;                              // [kStages][kPrefillKeys * D]
  uint8_t* sm_k_codes = reinterpret_cast<uint8_t*>(sm_v + kStages * kTileElems);  // FP8: [kPrefillKeys * D]
  uint8_t* sm_v_codes = sm_k_codes + kTileElems;
  start_after_previous_grid();

  const int seq = blockIdx.z;
  const int head = blockIdx.y;
  const int q_tile = gridDim.x - 1 - blockIdx.x;
  const int q_begin = a.cu_seqlens_q[seq];
  const int q_len = a.cu_seqlens_q[seq + 1] - q_begin;
  const int row0 = q_tile * kPrefillRows;
  if (row0 >= q_len) return;  // whole CTA: this sequence has fewer query tiles
  const int seq_len = a.seq_lens_k[seq];
  const int kv_head = head / (a.num_heads / a.num_kv_heads);
  const int past = seq_len - q_len;  // position of the sequence's query row 0
  const int last_row = min(row0 + kPrefillRows - 1, q_len - 1);
  const int last_pos = past + last_row;
  const int num_kv_tiles = last_pos >= 0 ? last_pos / kPrefillKeys + 1 : 0;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const size_t row_stride = static_cast<size_t>(a.num_heads) * D;
  __nv_bfloat16* out = a.out + static_cast<size_t>(q_begin) * row_stride + static_cast<size_t>(head) * D;

  if (num_kv_tiles == 0) {  // no key is visible (empty sequence): the softmax of nothing is written as zeros
    for (int i = tid; i < (last_row - row0 + 1) * kChunks; i += kPrefillThreads) {
      *reinterpret_cast<uint4*>(out + static_cast<size_t>(row0 + i / kChunks) * row_stride + (i % kChunks) * 8) =
          make_uint4(0, 0, 0, 0);
    }
    return;
  }

  // Q tile; rows past q_len are zero-filled (computed, never written).
  const __nv_bfloat16* q = a.q + static_cast<size_t>(q_begin) * row_stride + static_cast<size_t>(head) * D;
  for (int i = tid; i < kPrefillRows * kChunks; i += kPrefillThreads) {
    const int r = i / kChunks;
    const int c = i % kChunks;
    const bool valid = row0 + r < q_len;
    const __nv_bfloat16* src = valid ? q + static_cast<size_t>(row0 + r) * row_stride + c * 8 : a.q;
    cp_async_16(smem_address(sm_q + swizzled<D>(r, c)), src, valid ? 16 : 0);
  }

  const int* table = a.block_tables + static_cast<size_t>(seq) * a.max_blocks_per_seq;
  const int block_shift = __ffs(a.block_size) - 1;
  const int block_mask = a.block_size - 1;
  const size_t slot_stride = static_cast<size_t>(a.num_kv_heads) * D;
  const size_t head_offset = static_cast<size_t>(kv_head) * D;
  // Keys past seq_len are zero-filled: never read from the cache, and 0 * garbage cannot turn into NaN. bf16:
  // straight into the stage's swizzled tiles. FP8: the codes, 16 to a copy, into their own unswizzled tiles.
  constexpr int kCopyElems = kFp8 ? 16 : 8;  // elements per 16-byte copy
  constexpr int kCopiesPerRow = D / kCopyElems;
  const auto load_kv_tile = [&](int kv_tile, int stage) {
    const int key0 = kv_tile * kPrefillKeys;
    for (int i = tid; i < kPrefillKeys * kCopiesPerRow; i += kPrefillThreads) {
      const int r = i / kCopiesPerRow;
      const int c = i % kCopiesPerRow;
      const int key = key0 + r;
      const bool valid = key < seq_len;
      size_t offset = 0;  // elements
      if (valid) {
        const int block = __ldg(table + (key >> block_shift));
        offset = (static_cast<size_t>(block) * a.block_size + (key & block_mask)) * slot_stride + head_offset +
                 c * kCopyElems;
      }
      if constexpr (kFp8) {
        const int dst = r * D + c * kCopyElems;
        cp_async_16(smem_address(sm_k_codes + dst), static_cast<const uint8_t*>(a.k_cache) + offset, valid ? 16 : 0);
        cp_async_16(smem_address(sm_v_codes + dst), static_cast<const uint8_t*>(a.v_cache) + offset, valid ? 16 : 0);
      } else {
        const int dst = stage * kTileElems + swizzled<D>(r, c);
        cp_async_16(smem_address(sm_k + dst), static_cast<const __nv_bfloat16*>(a.k_cache) + offset, valid ? 16 : 0);
        cp_async_16(smem_address(sm_v + dst), static_cast<const __nv_bfloat16*>(a.v_cache) + offset, valid ? 16 : 0);
      }
    }
  };
  // FP8: the loaded codes of K and V become the bf16 tiles the MMAs read (exact: every E4M3 value is a bf16).
  const auto decode_codes = [&] {
    for (int i = tid; i < 2 * kPrefillKeys * (D / 16); i += kPrefillThreads) {
      const bool is_v = i >= kPrefillKeys * (D / 16);
      const int item = is_v ? i - kPrefillKeys * (D / 16) : i;
      const int r = item / (D / 16);
      const int c = item % (D / 16);  // 16 codes = two 8-value chunks of the bf16 row
      const uint4 codes = *reinterpret_cast<const uint4*>((is_v ? sm_v_codes : sm_k_codes) + r * D + c * 16);
      __nv_bfloat16* tile = is_v ? sm_v : sm_k;
      *reinterpret_cast<uint4*>(tile + swizzled<D>(r, 2 * c)) = fp8x8_to_bf16x8(make_uint2(codes.x, codes.y));
      *reinterpret_cast<uint4*>(tile + swizzled<D>(r, 2 * c + 1)) = fp8x8_to_bf16x8(make_uint2(codes.z, codes.w));
    }
  };
  load_kv_tile(0, 0);
  cp_async_commit();

  const int g = lane >> 2;  // fragment row (and row + 8)
  const int t = lane & 3;   // fragment column pair
  const int warp_row0 = row0 + warp * 16;
  const int row_pos[2] = {past + warp_row0 + g, past + warp_row0 + g + 8};
  const float score_scale = a.scale * kLog2e * (kFp8 ? a.k_scale : 1.0f);

  uint32_t q_frag[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};  // this thread's columns only; summed over the quad at the end

  for (int j = 0; j < num_kv_tiles; ++j) {
    if constexpr (kFp8) {
      cp_async_wait<0>();
      __syncthreads();  // tile j's codes (and Q) have arrived; every warp is done with tile j - 1's bf16 tiles
      decode_codes();
      __syncthreads();  // the bf16 tiles are written and the codes are free for tile j + 1
      if (j + 1 < num_kv_tiles) {
        load_kv_tile(j + 1, 0);
        cp_async_commit();
      }
    } else {
      if (j + 1 < num_kv_tiles) {
        load_kv_tile(j + 1, (j + 1) & 1);  // its stage was released by the barrier that ended iteration j - 1
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
    }
    if (j == 0) {
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc)
        ldmatrix_x4(q_frag[kc], smem_address(sm_q + swizzled<D>(warp * 16 + (lane & 15), kc * 2 + (lane >> 4))));
    }
    const __nv_bfloat16* k_tile = sm_k + (j % kStages) * kTileElems;
    const __nv_bfloat16* v_tile = sm_v + (j % kStages) * kTileElems;

    // S = Q K^T for this warp's 16 rows x 64 keys: 8 n-tiles of 8 keys.
    float s[kPrefillKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kPrefillKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
#pragma unroll
      for (int np = 0; np < kPrefillKeys / 16; ++np) {
        uint32_t b[4];  // b0, b1 of keys np*16..+7, then of keys np*16+8..+15
        ldmatrix_x4(b, smem_address(k_tile + swizzled<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                         kc * 2 + ((lane >> 3) & 1))));
        mma_bf16_16816(s[2 * np], q_frag[kc], b[0], b[1]);
        mma_bf16_16816(s[2 * np + 1], q_frag[kc], b[2], b[3]);
      }
    }

    // Scale into log2 units; mask keys after the row's position or past the sequence end.
    const int key0 = j * kPrefillKeys;
    const bool needs_mask = key0 + kPrefillKeys - 1 > past + row0 || key0 + kPrefillKeys > seq_len;
#pragma unroll
    for (int nt = 0; nt < kPrefillKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * score_scale;
        if (needs_mask) {
          const int key = key0 + nt * 8 + 2 * t + (e & 1);
          if (key > row_pos[e >> 1] || key >= seq_len) x = -INFINITY;
        }
        s[nt][e] = x;
      }
    }

    // Online softmax per row (rows g and g + 8 of the warp's 16); a row's 64 scores live in one quad.
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float tile_max = row_max[rr];
#pragma unroll
      for (int nt = 0; nt < kPrefillKeys / 8; ++nt) tile_max = fmaxf(tile_max, fmaxf(s[nt][2 * rr], s[nt][2 * rr + 1]));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float ref = tile_max == -INFINITY ? 0.f : tile_max;  // row with no visible key yet: stay NaN-free
      const float correction = exp2f(row_max[rr] - ref);
      row_max[rr] = tile_max;
      row_sum[rr] *= correction;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][2 * rr] *= correction;
        o[dt][2 * rr + 1] *= correction;
      }
#pragma unroll
      for (int nt = 0; nt < kPrefillKeys / 8; ++nt) {
        const float p0 = exp2f(s[nt][2 * rr] - ref);
        const float p1 = exp2f(s[nt][2 * rr + 1] - ref);
        s[nt][2 * rr] = p0;
        s[nt][2 * rr + 1] = p1;
        row_sum[rr] += p0 + p1;
      }
    }

    // O += P V: the S accumulators of n-tiles 2kk and 2kk+1 are exactly the A fragment of keys kk*16..+15.
#pragma unroll
    for (int kk = 0; kk < kPrefillKeys / 16; ++kk) {
      const uint32_t p_frag[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                                  pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                  pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];  // b0, b1 of dims dp*16..+7, then of dims dp*16+8..+15 (V transposed by ldmatrix)
        ldmatrix_x4_trans(b, smem_address(v_tile + swizzled<D>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                               dp * 2 + (lane >> 4))));
        mma_bf16_16816(o[2 * dp], p_frag, b[0], b[1]);
        mma_bf16_16816(o[2 * dp + 1], p_frag, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with this stage before iteration j + 1 refills it
  }

  // Normalise, stage the bf16 rows in this warp's own Q rows (only this warp ever read them), store 16 bytes.
  __syncwarp();  // the warp's ldmatrix reads of those rows are ordered before the lanes' stores below
  float inv[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float sum = row_sum[rr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inv[rr] = sum > 0.f ? (kFp8 ? a.v_scale : 1.f) / sum : 0.f;
  }
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int r = warp * 16 + g + 8 * rr;
      *reinterpret_cast<uint32_t*>(sm_q + swizzled<D>(r, dt) + 2 * t) =
          pack_bf16x2(o[dt][2 * rr] * inv[rr], o[dt][2 * rr + 1] * inv[rr]);
    }
  }
  __syncwarp();
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = i / kChunks;
    const int c = i % kChunks;
    const int q_row = warp_row0 + r;
    if (q_row < q_len) {
      *reinterpret_cast<uint4*>(out + static_cast<size_t>(q_row) * row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(sm_q + swizzled<D>(warp * 16 + r, c));
    }
  }
}

template <int D, bool kFp8>
void launch_prefill(const PagedAttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = prefill_smem_bytes<D, kFp8>();
  // Over 48 KB of dynamic shared memory must be opted into, per device. Not while a graph is being captured
  // (the call is not a stream operation); an uncaptured launch on this device always comes first.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &capture), "paged_attention_prefill: cudaStreamIsCapturing");
  if (capture == cudaStreamCaptureStatusNone) {
    check_cuda(cudaFuncSetAttribute(prefill_kernel<D, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)),
               "paged_attention_prefill: cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  }
  const dim3 grid((a.max_seqlen_q + kPrefillRows - 1) / kPrefillRows, a.num_heads, a.num_seqs);
  launch_programmatic("prefill_kernel", prefill_kernel<D, kFp8>, grid, dim3(kPrefillThreads), smem, stream, a);
}

}  // namespace

void paged_attention_prefill(const PagedAttentionArgs& args, cudaStream_t stream) {
  validate_args(args, "paged_attention_prefill");
  if (args.num_seqs == 0 || args.max_seqlen_q == 0) return;
  if (args.num_seqs > 65535 || args.num_heads > 65535)
    throw EngineError("paged_attention_prefill: num_seqs " + std::to_string(args.num_seqs) + " or num_heads " +
                      std::to_string(args.num_heads) + " exceeds the grid limit 65535");
  if (args.head_dim == 64) {
    args.fp8_cache ? launch_prefill<64, true>(args, stream) : launch_prefill<64, false>(args, stream);
  } else {
    args.fp8_cache ? launch_prefill<128, true>(args, stream) : launch_prefill<128, false>(args, stream);
  }
}

}  // namespace nanovllm::cuda
