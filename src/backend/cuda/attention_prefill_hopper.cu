// Prefill attention on Hopper's warpgroup MMA (wgmma, sm_90a): the same tiles, loads, causal masking and
// softmax as the mma.sync kernel (attention_prefill_tile.cuh), with both products issued by whole warpgroups
// straight from shared memory.
//
// A CTA of two warpgroups owns 128 query rows of one head; warpgroup w takes rows 64w .. 64w + 63 and both read
// the same K/V tiles. S (64 rows x 64 keys) = Q K^T takes Q and K from shared memory (both K-major: the head
// dimension is contiguous); O (64 x D) += P V takes P from registers (the S accumulators, rounded to bf16, are
// already the A fragment) and V from shared memory as an MN-major operand (keys are rows, the head dimension
// contiguous), so no tile is transposed or read twice by ldmatrix. Tiles are stored as 64-value panels with the
// hardware's 128-byte swizzle (attention_wgmma.cuh); the loads are cp.async copies in two stages as in the
// mma.sync kernel, and a proxy fence hands them to the MMAs.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_prefill_hopper.h"
#include "backend/cuda/attention_prefill_tile.cuh"
#include "backend/cuda/attention_wgmma.cuh"
#include "backend/cuda/programmatic_launch.cuh"

namespace nanovllm::cuda::attention_detail {
namespace {

constexpr int kGroupRows = 64;  // query rows per warpgroup (the wgmma M)
// Two warpgroups share each K/V tile: half the tile loads per query row of one, and with two CTAs per SM
// (at most 128 registers a thread, ~97 KB of shared memory each) four warpgroups take turns on the tensor cores.
// Measured on an H100 (16 x 16k keys, 0.6B heads): one warpgroup a CTA 293 TFLOP/s, two 444.
constexpr int kGroups = 2;
constexpr int kThreads = kGroups * 128;
constexpr int kRows = kGroups * kGroupRows;
static_assert(kGroupRows == kPrefillKeys, "Q and K/V tiles share one panel layout");

// Tiles of 64 rows in 128-byte-swizzled panels of 64 values; the CTA's Q tile is one such tile per warpgroup.
template <int D>
struct PanelSwizzle {
  static __device__ __forceinline__ int at(int row, int chunk) {
    return (row / kGroupRows) * kGroupRows * D + panel_offset(kGroupRows, row % kGroupRows, chunk);
  }
};

template <int D, bool kFp8>
using WgmmaKvTiles = KvTiles<D, kFp8, kThreads, PanelSwizzle<D>, true>;

// Q (a 64-row tile per warpgroup), then the K/V tiles, plus the slack that puts the first tile on a 1024-byte
// boundary.
template <int D, bool kFp8>
constexpr size_t hopper_smem_bytes() {
  return kSwizzleAtom + static_cast<size_t>(kRows) * D * sizeof(__nv_bfloat16) + WgmmaKvTiles<D, kFp8>::kBytes;
}

// S = Q K^T for this warpgroup's 64 rows and the 64 keys of the K tile at k_addr: D / 16 k-steps over the head
// dimension, issued and committed (asynchronous until wgmma_wait).
template <int D>
__device__ __forceinline__ void issue_scores(float (&s)[kPrefillKeys / 8][4], uint32_t q_addr, uint32_t k_addr) {
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    wgmma_64x64_ss(s, k_major_descriptor(q_addr, kGroupRows, kc), k_major_descriptor(k_addr, kPrefillKeys, kc), kc > 0);
  }
  wgmma_commit();
}

// O += P V for the V tile at v_addr: kPrefillKeys / 16 k-steps over the keys, issued and committed. The P
// fragments are read asynchronously: they stay live (wgmma_hold) until the MMAs are waited for.
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 8][4], const uint32_t (&p)[kPrefillKeys / 16][4],
                                         uint32_t v_addr) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kPrefillKeys / 16; ++kk) {
    const uint64_t v_desc = mn_major_descriptor(v_addr, kPrefillKeys, kk);
    if constexpr (D == 128) {
      wgmma_64x128_rs(o, p[kk], v_desc);
    } else {
      wgmma_64x64_rs(o, p[kk], v_desc);
    }
  }
  wgmma_commit();
}

// Warpgroup w owns query rows 64w .. 64w + 63 of the CTA's tile.
template <int D, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) prefill_wgmma_kernel(PagedAttentionArgs a, PrefillTileOrder order) {
#ifdef NANOVLLM_WGMMA
  using Layout = PanelSwizzle<D>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_address(smem_raw);
  const uint32_t aligned = (raw + kSwizzleAtom - 1) & ~static_cast<uint32_t>(kSwizzleAtom - 1);
  __nv_bfloat16* sm_q = reinterpret_cast<__nv_bfloat16*>(smem_raw + (aligned - raw));  // [kGroups][64 * D]
  start_after_previous_grid();

  PrefillTile tile;
  if (!begin_prefill_tile<D, kRows, kThreads, Layout>(a, order, tile, sm_q)) return;
  const WgmmaKvTiles<D, kFp8> kv(a, tile, sm_q + kRows * D);
  kv.start();

  const int warp = threadIdx.x / 32;
  const int group = warp / 4;
  const int g = (threadIdx.x % 32) >> 2;  // fragment row (and row + 8)
  int row_pos[2];
  fragment_row_positions(tile, warp, g, row_pos);
  const int group_first_pos = tile.past + tile.row0 + group * kGroupRows;
  // Key tiles past this warpgroup's last valid row are masked whole for it (the CTA's last tile for warpgroup
  // 0, every tile for a warpgroup whose rows are all past q_len): it skips them, which leaves its softmax state
  // as it was.
  const int group_last_row = min(tile.row0 + (group + 1) * kGroupRows - 1, tile.q_len - 1);
  const int group_tiles =
      group_last_row < tile.row0 + group * kGroupRows ? 0 : (tile.past + group_last_row) / kPrefillKeys + 1;
  const float score_scale = a.scale * kLog2e * (kFp8 ? a.k_scale : 1.0f);
  const uint32_t q_addr = smem_address(sm_q + group * kGroupRows * D);

  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float s[kPrefillKeys / 8][4];
  uint32_t p[kPrefillKeys / 16][4];
  SoftmaxRows softmax;

  // One tile at a time: S, softmax, P V, each product waited for before the next step (issuing tile j + 1's S
  // behind tile j's P V measured slower: it spilled, and tile j + 2's copies had half an iteration to land).
  for (int j = 0; j < tile.num_kv_tiles; ++j) {
    kv.acquire(j);
    if (j < group_tiles) {
      issue_scores<D>(s, q_addr, smem_address(kv.k(j)));
      wgmma_wait<0>();
      wgmma_hold(s);
      softmax_step<D>(s, o, softmax, j * kPrefillKeys, group_first_pos, row_pos, tile.seq_len, score_scale);
#pragma unroll
      for (int kk = 0; kk < kPrefillKeys / 16; ++kk) p_fragment(s, kk, p[kk]);
      issue_pv<D>(o, p, smem_address(kv.v(j)));
      wgmma_wait<0>();
      wgmma_hold(o);
      wgmma_hold(p);
    }
    __syncthreads();  // the MMAs are done with this stage before iteration j + 1 refills it
  }
  // Q is no longer read: each warp stages its output rows there.
  store_output<D, Layout>(tile, o, softmax, kFp8 ? a.v_scale : 1.f, sm_q);
#endif
}

template <int D, bool kFp8>
void launch(const PagedAttentionArgs& a, cudaStream_t stream) {
  launch_prefill_grid<kRows, kThreads>("prefill_wgmma_kernel", prefill_wgmma_kernel<D, kFp8>,
                                       hopper_smem_bytes<D, kFp8>(), a, stream);
}

}  // namespace

void launch_hopper_prefill(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.head_dim == 64) {
    a.fp8_cache ? launch<64, true>(a, stream) : launch<64, false>(a, stream);
  } else {
    a.fp8_cache ? launch<128, true>(a, stream) : launch<128, false>(a, stream);
  }
}

}  // namespace nanovllm::cuda::attention_detail

namespace nanovllm::cuda {

PrefillKernel prefill_kernel_for_device() {
#ifdef NANOVLLM_CUDA_HAS_SM90A
  int device = 0;
  int major = 0;
  int minor = 0;
  attention_detail::check_cuda(cudaGetDevice(&device), "prefill_kernel_for_device: cudaGetDevice");
  attention_detail::check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                               "prefill_kernel_for_device: compute capability major");
  attention_detail::check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                               "prefill_kernel_for_device: compute capability minor");
  if (major == 9 && minor == 0) return PrefillKernel::kWgmma;
#endif
  return PrefillKernel::kMmaSync;
}

}  // namespace nanovllm::cuda
