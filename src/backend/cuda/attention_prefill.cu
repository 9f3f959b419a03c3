// Prefill attention (any q_len: full prompts, chunked prefill, prefix-cache hits) over the paged cache,
// FlashAttention-2 style on tensor cores (mma.sync m16n8k16 bf16 -> fp32; runs on sm_80 and sm_90).
//
// One CTA of 4 warps owns 64 query rows of one head (the grid's order: PrefillTileOrder); each warp owns 16 rows.
// Keys come in tiles of 64 through the block table into shared memory with cp.async (two stages: tile j+1 loads
// while tile j is computed). S = Q K^T and O += P V are mma.sync; the softmax is an fp32 online softmax in
// registers; P is rounded to bf16 for the second product. Causal: query row i of a sequence sits at position
// seq_len - q_len + i, so key tiles past the CTA's last position are never loaded and only tiles that cross the
// diagonal (or the sequence end) are masked. An FP8 cache is loaded as codes and turned into the bf16 tiles in
// shared memory before each tile's MMAs;
// k_scale goes into the score scale and v_scale into the final normalisation.
//
// On sm_90 the caller asks for the wgmma kernel instead (attention_prefill_hopper.cu, PrefillKernel::kWgmma);
// the two share the tile geometry, copies, softmax and epilogue (attention_prefill_tile.cuh).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_prefill_hopper.h"
#include "backend/cuda/attention_prefill_tile.cuh"
#include "backend/cuda/programmatic_launch.cuh"

namespace nanovllm::cuda {
namespace {

using namespace attention_detail;

constexpr int kPrefillThreads = 128;
constexpr int kPrefillRows = 64;  // query rows per CTA, 16 per warp

template <int D, bool kFp8>
using MmaKvTiles = KvTiles<D, kFp8, kPrefillThreads, RowSwizzle<D>, false>;

// Q, then the K/V tiles.
template <int D, bool kFp8>
constexpr size_t prefill_smem_bytes() {
  return static_cast<size_t>(kPrefillRows) * D * sizeof(__nv_bfloat16) + MmaKvTiles<D, kFp8>::kBytes;
}

template <int D, bool kFp8>
__global__ void __launch_bounds__(kPrefillThreads) prefill_kernel(PagedAttentionArgs a, PrefillTileOrder order) {
  using Layout = RowSwizzle<D>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* sm_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  start_after_previous_grid();

  PrefillTile tile;
  if (!begin_prefill_tile<D, kPrefillRows, kPrefillThreads, Layout>(a, order, tile, sm_q)) return;
  const MmaKvTiles<D, kFp8> kv(a, tile, sm_q + kPrefillRows * D);
  kv.start();

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;  // fragment row (and row + 8)
  int row_pos[2];
  fragment_row_positions(tile, warp, g, row_pos);
  const float score_scale = a.scale * kLog2e * (kFp8 ? a.k_scale : 1.0f);

  uint32_t q_frag[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  SoftmaxRows softmax;

  for (int j = 0; j < tile.num_kv_tiles; ++j) {
    kv.acquire(j);
    if (j == 0) {
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc)
        ldmatrix_x4(q_frag[kc], smem_address(sm_q + Layout::at(warp * 16 + (lane & 15), kc * 2 + (lane >> 4))));
    }
    const __nv_bfloat16* k_tile = kv.k(j);
    const __nv_bfloat16* v_tile = kv.v(j);

    // S = Q K^T for this warp's 16 rows x 64 keys: 8 n-tiles of 8 keys.
    float s[kPrefillKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kPrefillKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
#pragma unroll
      for (int np = 0; np < kPrefillKeys / 16; ++np) {
        uint32_t b[4];  // b0, b1 of keys np*16..+7, then of keys np*16+8..+15
        ldmatrix_x4(b, smem_address(k_tile +
                                    Layout::at(np * 16 + (lane & 7) + ((lane >> 4) << 3), kc * 2 + ((lane >> 3) & 1))));
        mma_bf16_16816(s[2 * np], q_frag[kc], b[0], b[1]);
        mma_bf16_16816(s[2 * np + 1], q_frag[kc], b[2], b[3]);
      }
    }

    softmax_step<D>(s, o, softmax, j * kPrefillKeys, tile.past + tile.row0, row_pos, tile.seq_len, score_scale);

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kPrefillKeys / 16; ++kk) {
      uint32_t p_frag[4];
      p_fragment(s, kk, p_frag);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];  // b0, b1 of dims dp*16..+7, then of dims dp*16+8..+15 (V transposed by ldmatrix)
        ldmatrix_x4_trans(b, smem_address(v_tile + Layout::at(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                              dp * 2 + (lane >> 4))));
        mma_bf16_16816(o[2 * dp], p_frag, b[0], b[1]);
        mma_bf16_16816(o[2 * dp + 1], p_frag, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with this stage before iteration j + 1 refills it
  }
  // The warp's own Q rows (only this warp ever read them) stage its output.
  store_output<D, Layout>(tile, o, softmax, kFp8 ? a.v_scale : 1.f, sm_q);
}

template <int D, bool kFp8>
void launch_prefill(const PagedAttentionArgs& a, cudaStream_t stream) {
  launch_prefill_grid<kPrefillRows, kPrefillThreads>("prefill_kernel", prefill_kernel<D, kFp8>,
                                                     prefill_smem_bytes<D, kFp8>(), a, stream);
}

}  // namespace

void paged_attention_prefill(const PagedAttentionArgs& args, cudaStream_t stream, PrefillKernel kernel, void* shadow,
                             size_t shadow_bytes) {
  validate_args(args, "paged_attention_prefill");
  if (args.num_seqs == 0 || args.max_seqlen_q == 0) return;
  if (kernel == PrefillKernel::kWgmmaFp8Mma) return launch_fp8_mma_prefill(args, shadow, shadow_bytes, stream);
  if (kernel == PrefillKernel::kWgmmaFp8Shadow || fp8_prefill_takes_shadow(args, kernel, shadow, shadow_bytes))
    return launch_fp8_shadow_prefill(args, shadow, shadow_bytes, stream);
  if (kernel != PrefillKernel::kMmaSync) return launch_hopper_prefill(args, stream, kernel);
  if (args.head_dim == 64) {
    args.fp8_cache ? launch_prefill<64, true>(args, stream) : launch_prefill<64, false>(args, stream);
  } else {
    args.fp8_cache ? launch_prefill<128, true>(args, stream) : launch_prefill<128, false>(args, stream);
  }
}

}  // namespace nanovllm::cuda
