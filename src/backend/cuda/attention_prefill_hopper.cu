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
//
// With a bf16 cache of blocks of 64 keys or more at d = 128 (the engine's default), a warp-specialised kernel
// takes over: TMA copies, 128-key tiles, the copies and the two warpgroups' products and softmax overlapped.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_prefill_hopper.h"
#include "backend/cuda/attention_prefill_tile.cuh"
#include "backend/cuda/attention_wgmma.cuh"
#include "backend/cuda/paged_cache_tensor_map.h"
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

// S = Q K^T for this warpgroup's 64 rows and the kKeys keys of the K tile at k_addr: D / 16 k-steps over the
// head dimension, issued and committed (asynchronous until wgmma_wait).
template <int D, int kKeys = kPrefillKeys>
__device__ __forceinline__ void issue_scores(float (&s)[kKeys / 8][4], uint32_t q_addr, uint32_t k_addr) {
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    if constexpr (kKeys == 64) {
      wgmma_64x64_ss(s, k_major_descriptor(q_addr, kGroupRows, kc), k_major_descriptor(k_addr, kKeys, kc), kc > 0);
    } else {
      wgmma_64x128_ss(s, k_major_descriptor(q_addr, kGroupRows, kc), k_major_descriptor(k_addr, kKeys, kc), kc > 0);
    }
  }
  wgmma_commit();
}

// O += P V for the V tile at v_addr: kKeys / 16 k-steps over the keys, issued and committed. The P fragments
// are read asynchronously: they stay live (wgmma_hold) until the MMAs are waited for.
template <int D, int kKeys = kPrefillKeys>
__device__ __forceinline__ void issue_pv(float (&o)[D / 8][4], const uint32_t (&p)[kKeys / 16][4], uint32_t v_addr) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    const uint64_t v_desc = mn_major_descriptor(v_addr, kKeys, kk);
    if constexpr (D == 128) {
      wgmma_64x128_rs(o, p[kk], v_desc);
    } else {
      wgmma_64x64_rs(o, p[kk], v_desc);
    }
  }
  wgmma_commit();
}

// The position of warpgroup `group`'s first query row, and how many key tiles of kKeys keys it attends: those up
// to its last valid row's position. Later tiles are masked whole for it (the CTA's last tile for warpgroup 0, every
// tile for a warpgroup whose rows are all past q_len): it skips them, which leaves its softmax state as it was.
struct WarpgroupKeys {
  int first_pos;
  int tiles;
};
template <int kKeys>
__device__ __forceinline__ WarpgroupKeys warpgroup_keys(const PrefillTile& t, int group) {
  const int first_row = t.row0 + group * kGroupRows;
  const int last_row = min(first_row + kGroupRows - 1, t.q_len - 1);
  return {t.past + first_row, last_row < first_row ? 0 : (t.past + last_row) / kKeys + 1};
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
  const auto [group_first_pos, group_tiles] = warpgroup_keys<kPrefillKeys>(tile, group);
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

// The warp-specialised kernel (bf16 cache, block_size >= 64): warpgroup 0 copies, warpgroups 1 and 2 compute 64
// query rows each over 128-key tiles. Thread 0 of the copying warpgroup issues each K/V tile as TMA boxes of 64
// keys x 64 values through the block table into kWsStages stages and hands it over with an mbarrier that counts
// the bytes landed; the computing warpgroups issue tile j's S ahead of tile j - 1's P V, run tile j's softmax while
// P V is on the tensor cores, take turns issuing (named barriers 1 and 2, "ping-pong") and release each stage
// through a second mbarrier. No CTA-wide barrier after the set-up.
constexpr int kWsThreads = 3 * 128;
constexpr int kWsKeys = 128;  // keys per K/V tile
constexpr int kWsStages = 3;  // 3 x 64 KB of K/V at d = 128

#ifdef NANOVLLM_WGMMA  // what only the sm_90a code of the kernel uses
constexpr int kCopyThreads = 128;

// K/V tiles of kWsKeys rows as 128-byte-swizzled panels of [kWsKeys rows][64 values] (what a K-major B operand of
// N = kWsKeys and an MN-major B operand of K = kWsKeys read); a TMA box with the 128-byte swizzle lands as 64 rows
// of such a panel.
struct KeyPanels {
  static __device__ __forceinline__ int at(int row, int chunk) { return panel_offset(kWsKeys, row, chunk); }
};
#endif

// Q, the K/V stages and the full / empty mbarriers of each stage, plus the slack that puts Q on a 1024-byte boundary.
template <int D>
constexpr size_t ws_smem_bytes() {
  return kSwizzleAtom + static_cast<size_t>(kRows) * D * sizeof(__nv_bfloat16) +
         static_cast<size_t>(kWsStages) * 2 * kWsKeys * D * sizeof(__nv_bfloat16) + 2 * kWsStages * sizeof(uint64_t);
}

template <int D>
__global__ void __launch_bounds__(kWsThreads, 1)
    prefill_wgmma_ws_kernel(PagedAttentionArgs a, PrefillTileOrder order, const __grid_constant__ CUtensorMap k_map,
                            const __grid_constant__ CUtensorMap v_map) {
#ifdef NANOVLLM_WGMMA
  using Layout = PanelSwizzle<D>;
  constexpr int kTileElems = kWsKeys * D;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_address(smem_raw);
  const uint32_t aligned = (raw + kSwizzleAtom - 1) & ~static_cast<uint32_t>(kSwizzleAtom - 1);
  __nv_bfloat16* sm_q = reinterpret_cast<__nv_bfloat16*>(smem_raw + (aligned - raw));
  __nv_bfloat16* sm_k = sm_q + kRows * D;                              // [kWsStages][kWsKeys * D]
  __nv_bfloat16* sm_v = sm_k + kWsStages * kTileElems;                 // [kWsStages][kWsKeys * D]
  const uint32_t full0 = smem_address(sm_v + kWsStages * kTileElems);  // kWsStages barriers, then the empties
  const auto full = [&](int stage) { return full0 + 8u * static_cast<uint32_t>(stage); };
  const auto empty = [&](int stage) { return full0 + 8u * static_cast<uint32_t>(kWsStages + stage); };
  start_after_previous_grid();

  const PrefillTile tile = prefill_tile<D, kRows>(a, order);
  if (tile.row0 >= tile.q_len) return;
  if (tile.num_kv_tiles == 0) return write_zero_rows<D, kWsThreads>(tile);
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kWsStages; ++stage) {
      mbarrier_init(full(stage), 1);
      mbarrier_init(empty(stage), 2 * 128);
    }
  }
  __syncthreads();  // the barriers are initialised; the last CTA-wide barrier
  const int n = (tile.past + tile.last_row) / kWsKeys + 1;

  if (threadIdx.x < kCopyThreads) {
    warpgroup_registers_down<40>();
    // Tile j goes to stage j % kWsStages once both computing warpgroups released its previous use; Q's copies
    // land before tile 0 is handed over.
    const KvTileLoader<D, false, kCopyThreads, KeyPanels, kWsKeys> loader(a, tile);
    load_q_tile<D, kRows, kCopyThreads, Layout>(a, tile, sm_q);
    cp_async_commit();
    const auto copier_sync = [] { asm volatile("bar.sync 3, %0;\n" ::"n"(kCopyThreads) : "memory"); };
    const int* table = a.block_tables + static_cast<size_t>(tile.seq) * a.max_blocks_per_seq;
    const int shift = log2_of_power_of_two(a.block_size);
    const int mask = a.block_size - 1;
    // Thread 0 alone waits for every stage's release and issues the TMA tiles. A tile that runs past the sequence's
    // end (only the last can) is copied by every copying thread with cp.async instead, zero-filled past the end:
    // TMA would bring the cache's stale slots there, and 0 * NaN in P V is NaN.
    for (int j = 0; j < n; ++j) {
      const int stage = j % kWsStages;
      if ((j + 1) * kWsKeys <= tile.seq_len) {
        if (j == 0) {  // Q's copies have landed before the arrival that hands tile 0 over
          cp_async_wait<0>();
          fence_shared_for_wgmma();
          copier_sync();
        }
        if (threadIdx.x == 0) {
          if (j >= kWsStages) mbarrier_wait(empty(stage), (j / kWsStages - 1) & 1);
          mbarrier_arrive_expect_tx(full(stage), 2u * kTileElems * sizeof(__nv_bfloat16));
#pragma unroll
          for (int h = 0; h < kWsKeys / kTmaBoxKeys; ++h) {
            const int key = j * kWsKeys + h * kTmaBoxKeys;
            const int slot = (__ldg(table + (key >> shift)) << shift) | (key & mask);
#pragma unroll
            for (int dh = 0; dh < D / kPanelValues; ++dh) {
              const int offset = panel_offset(kWsKeys, h * kTmaBoxKeys, dh * kPanelValues / 8);
              tma_load_3d(smem_address(sm_k + stage * kTileElems + offset), &k_map, dh * kPanelValues, tile.kv_head,
                          slot, full(stage));
              tma_load_3d(smem_address(sm_v + stage * kTileElems + offset), &v_map, dh * kPanelValues, tile.kv_head,
                          slot, full(stage));
            }
          }
        }
      } else {  // a tile that runs past the sequence's end: zero-filled copies
        // Only thread 0 has waited for every earlier phase: a parity wait names only the last two.
        if (threadIdx.x == 0 && j >= kWsStages) mbarrier_wait(empty(stage), (j / kWsStages - 1) & 1);
        copier_sync();
        loader.load(j, sm_k + stage * kTileElems, sm_v + stage * kTileElems);
        cp_async_commit();
        cp_async_wait<0>();
        fence_shared_for_wgmma();
        copier_sync();
        if (threadIdx.x == 0) mbarrier_arrive(full(stage));
      }
    }
    return;
  }
  warpgroup_registers_up<232>();

  const int ct = static_cast<int>(threadIdx.x) - kCopyThreads;  // 0 .. 255 over the computing warpgroups
  const int warp = ct / 32;
  const int group = warp / 4;
  const int g = (ct % 32) >> 2;
  int row_pos[2];
  fragment_row_positions(tile, warp, g, row_pos);
  const auto [group_first_pos, group_tiles] = warpgroup_keys<kWsKeys>(tile, group);
  const float score_scale = a.scale * kLog2e;
  const uint32_t q_addr = smem_address(sm_q + group * kGroupRows * D);
  const auto k_addr = [&](int j) { return smem_address(sm_k + (j % kWsStages) * kTileElems); };
  const auto v_addr = [&](int j) { return smem_address(sm_v + (j % kWsStages) * kTileElems); };

  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float s[kWsKeys / 8][4];
  uint32_t p[kWsKeys / 16][4];
  SoftmaxRows softmax;
  float correction[2];

  // Ping-pong: the two warpgroups take turns issuing their products (named barriers 1 and 2), so one's softmax
  // runs while the other's MMAs hold the tensor cores. Each takes n + 1 turns; warpgroup 0 goes first.
  const uint32_t my_turn = 1 + group, their_turn = 2 - group;
  const auto turn_begin = [&] { asm volatile("bar.sync %0, 256;\n" ::"r"(my_turn) : "memory"); };
  const auto turn_end = [&] { asm volatile("bar.arrive %0, 256;\n" ::"r"(their_turn) : "memory"); };
  if (group == 1) turn_end();

  mbarrier_wait(full(0), 0);
  turn_begin();
  if (group_tiles > 0) {
    issue_scores<D, kWsKeys>(s, q_addr, k_addr(0));
    turn_end();
    wgmma_wait<0>();
    wgmma_hold(s);
    softmax_step<D>(s, o, softmax, 0, group_first_pos, row_pos, tile.seq_len, score_scale);
#pragma unroll
    for (int kk = 0; kk < kWsKeys / 16; ++kk) p_fragment(s, kk, p[kk]);
  } else {
    turn_end();
  }
  for (int j = 1; j < n; ++j) {
    mbarrier_wait(full(j % kWsStages), (j / kWsStages) & 1);
    turn_begin();
    if (j < group_tiles) {
      issue_scores<D, kWsKeys>(s, q_addr, k_addr(j));
      issue_pv<D, kWsKeys>(o, p, v_addr(j - 1));
      turn_end();
      wgmma_wait<1>();
      wgmma_hold(s);
      softmax_step<D, true>(s, o, softmax, j * kWsKeys, group_first_pos, row_pos, tile.seq_len, score_scale,
                            correction);
      wgmma_wait<0>();
      wgmma_hold(o);
      wgmma_hold(p);
      rescale_rows<D>(o, correction);
#pragma unroll
      for (int kk = 0; kk < kWsKeys / 16; ++kk) p_fragment(s, kk, p[kk]);
    } else if (j == group_tiles) {
      issue_pv<D, kWsKeys>(o, p, v_addr(j - 1));
      turn_end();
      wgmma_wait<0>();
      wgmma_hold(o);
    } else {
      turn_end();
    }
    mbarrier_arrive(empty((j - 1) % kWsStages));  // tile j - 1's K and V are no longer read
  }
  turn_begin();
  if (n <= group_tiles) {
    issue_pv<D, kWsKeys>(o, p, v_addr(n - 1));
    if (group == 0) turn_end();  // warpgroup 1's last turn has no successor
    wgmma_wait<0>();
    wgmma_hold(o);
  } else if (group == 0) {
    turn_end();
  }
  // Q is no longer read by this warpgroup's MMAs: each warp stages its output rows there.
  store_output<D, Layout, kCopyThreads / 32>(tile, o, softmax, a.out_scale, sm_q);
#endif
}

template <int D, bool kFp8>
void launch(const PagedAttentionArgs& a, cudaStream_t stream) {
  launch_prefill_grid<kRows, kThreads>("prefill_wgmma_kernel", prefill_wgmma_kernel<D, kFp8>,
                                       hopper_smem_bytes<D, kFp8>(), a, stream);
}

template <int D>
void launch_warp_specialized(const PagedAttentionArgs& a, cudaStream_t stream) {
  const CUtensorMap k_map = paged_cache_tensor_map(a.k_cache, a.num_kv_heads, D, kTmaBoxKeys);
  const CUtensorMap v_map = paged_cache_tensor_map(a.v_cache, a.num_kv_heads, D, kTmaBoxKeys);
  launch_prefill_grid<kRows, kWsThreads>("prefill_wgmma_ws_kernel", prefill_wgmma_ws_kernel<D>, ws_smem_bytes<D>(), a,
                                         stream, k_map, v_map);
}

}  // namespace

void launch_hopper_prefill(const PagedAttentionArgs& a, cudaStream_t stream, PrefillKernel kernel) {
  if (kernel == PrefillKernel::kWgmma) kernel = wgmma_prefill_variant(a);
  if (kernel == PrefillKernel::kWgmmaWarpSpecialized) {
    if (!prefill_warp_specialized_supports(a))
      throw EngineError(
          "paged_attention_prefill: the warp-specialised kernel needs head_dim 128, a bf16 cache "
          "and blocks of at least " +
          std::to_string(kTmaBoxKeys) + " keys (got head_dim " + std::to_string(a.head_dim) +
          (a.fp8_cache ? ", an FP8 cache" : ", a bf16 cache") + ", block_size " + std::to_string(a.block_size) + ")");
    launch_warp_specialized<128>(a, stream);
  } else if (a.head_dim == 64) {
    a.fp8_cache ? launch<64, true>(a, stream) : launch<64, false>(a, stream);
  } else {
    a.fp8_cache ? launch<128, true>(a, stream) : launch<128, false>(a, stream);
  }
}

}  // namespace nanovllm::cuda::attention_detail

namespace nanovllm::cuda {

bool prefill_warp_specialized_supports(const PagedAttentionArgs& args) {
  return args.head_dim == 128 && !args.fp8_cache && args.block_size >= attention_detail::kTmaBoxKeys;
}

// The warp-specialised kernel where it is faster. Measured on an H100 against the two-stage kernel: 16 x 16k
// 432 -> 548-551 TFLOP/s and 1 x 32k 409-412 -> 535-536 (0.6B heads; 8B 411-418 -> 531-533 and 417-420 ->
// 536-545), but 16 x 1024 317-319 -> 296-297 (likely: its 128-key tiles waste more of each diagonal tile, and a
// short prompt's few tiles barely fill its pipeline). So it takes the prompts that are handed out per sequence
// (over kAcrossSequencesMaxQueryRows) and nothing else. (At d = 64 an experiment measured it 25% slower than the
// two-stage kernel; it is not built for d = 64.)
PrefillKernel wgmma_prefill_variant(const PagedAttentionArgs& args) {
  const bool long_prompts =
      attention_detail::prefill_tile_order(args) == attention_detail::PrefillTileOrder::kPerSequence;
  return prefill_warp_specialized_supports(args) && long_prompts ? PrefillKernel::kWgmmaWarpSpecialized
                                                                 : PrefillKernel::kWgmmaTwoStage;
}

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
