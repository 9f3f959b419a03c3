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
#include "backend/cuda/fp8_vec.cuh"
#include "backend/cuda/programmatic_launch.cuh"
#include "backend/cuda/sm90a_code.h"
#include "backend/cuda/tensor_maps.h"
#include "common/fp8.h"

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

#ifdef NANOVLLM_WGMMA
// The warp-specialised kernels' stage barriers in shared memory from `full0`: kStages "full" mbarriers (the copier
// hands a stage over), then kStages "empty" ones (both computing warpgroups release it).
template <int kStages>
struct StageBarriers {
  uint32_t full0;
  __device__ __forceinline__ uint32_t full(int stage) const { return full0 + 8u * static_cast<uint32_t>(stage); }
  __device__ __forceinline__ uint32_t empty(int stage) const {
    return full0 + 8u * static_cast<uint32_t>(kStages + stage);
  }
};

// The set-up both warp-specialised kernels share: the CTA's tile (false where it has nothing to attend, or only
// zero rows to write) and the stage barriers initialised.
template <int D, int kStages>
__device__ __forceinline__ bool begin_warp_specialized_tile(const PagedAttentionArgs& a, PrefillTileOrder order,
                                                            StageBarriers<kStages> bars, PrefillTile& tile) {
  tile = prefill_tile<D, kRows>(a, order);
  if (tile.row0 >= tile.q_len) return false;
  if (tile.num_kv_tiles == 0) {
    write_zero_rows<D, kWsThreads>(tile);
    return false;
  }
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrier_init(bars.full(stage), 1);
      mbarrier_init(bars.empty(stage), 2 * 128);
    }
  }
  __syncthreads();  // the barriers are initialised; the last CTA-wide barrier
  return true;
}

// A thread of the warp-specialised kernels' computing warpgroups (threads kCopyThreads ..): its warp among them,
// its warpgroup, its fragment row g (and g + 8) and those rows' positions in the sequence.
struct ComputingThread {
  int warp, group, g;
  int row_pos[2];
};
__device__ __forceinline__ ComputingThread computing_thread(const PrefillTile& tile) {
  const int ct = static_cast<int>(threadIdx.x) - kCopyThreads;  // 0 .. 255 over the computing warpgroups
  ComputingThread t{ct / 32, ct / 128, (ct % 32) >> 2, {0, 0}};
  fragment_row_positions(tile, t.warp, t.g, t.row_pos);
  return t;
}

// The computing warpgroups' loop of both warp-specialised kernels over key tiles 0 .. n - 1 of kKeys keys (tile j
// in stage j % kStages, handed over and released through `bars`). The two warpgroups take
// turns issuing (named barriers 1 and 2, "ping-pong"), so one's softmax runs while the other's MMAs hold the tensor
// cores; each takes n + 1 turns, warpgroup 0 first. Tile j's S is issued ahead of tile j - 1's P V and its softmax
// runs while P V does. Ops: score_scales(scale) gives the thread's two rows' softmax scales (asked once tile 0 is
// handed over, so it may read what the copying warpgroup wrote before); issue_scores(s, j) and issue_pv(o, p, j)
// issue and commit; to_p(s, p) forms P's A fragments from the weights. o is set to zero here, then accumulated.
template <int D, int kKeys, int kStages, int kWeightLog2, int kPSteps, typename Ops>
__device__ __forceinline__ void warp_specialized_products(const PrefillTile& tile, int n, const ComputingThread& me,
                                                          StageBarriers<kStages> bars, float (&o)[D / 8][4],
                                                          SoftmaxRows& softmax, const Ops& ops) {
  const int group = me.group;
  const auto& row_pos = me.row_pos;
  const auto [group_first_pos, group_tiles] = warpgroup_keys<kKeys>(tile, group);
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float s[kKeys / 8][4];
  uint32_t p[kPSteps][4];
  float correction[2];
  const uint32_t my_turn = 1 + group, their_turn = 2 - group;
  const auto turn_begin = [&] { asm volatile("bar.sync %0, 256;\n" ::"r"(my_turn) : "memory"); };
  const auto turn_end = [&] { asm volatile("bar.arrive %0, 256;\n" ::"r"(their_turn) : "memory"); };

  float score_scale[2];
  mbarrier_wait(bars.full(0), 0);
  ops.score_scales(score_scale);
  if (group == 1) turn_end();  // warpgroup 0 takes the first turn
  turn_begin();
  if (group_tiles > 0) {
    ops.issue_scores(s, 0);
    turn_end();
    wgmma_wait<0>();
    wgmma_hold(s);
    // O is still zero: the deferred rescale has nothing to do.
    softmax_step<D, true, kKeys / 8, kWeightLog2>(s, o, softmax, 0, group_first_pos, row_pos, tile.seq_len, score_scale,
                                                  correction);
    ops.to_p(s, p);
  } else {
    turn_end();
  }
  for (int j = 1; j < n; ++j) {
    mbarrier_wait(bars.full(j % kStages), (j / kStages) & 1);
    turn_begin();
    if (j < group_tiles) {
      ops.issue_scores(s, j);
      ops.issue_pv(o, p, j - 1);
      turn_end();
      wgmma_wait<1>();
      wgmma_hold(s);
      softmax_step<D, true, kKeys / 8, kWeightLog2>(s, o, softmax, j * kKeys, group_first_pos, row_pos, tile.seq_len,
                                                    score_scale, correction);
      wgmma_wait<0>();
      wgmma_hold(o);
      wgmma_hold(p);
      rescale_rows<D>(o, correction);
      ops.to_p(s, p);
    } else if (j == group_tiles) {
      ops.issue_pv(o, p, j - 1);
      turn_end();
      wgmma_wait<0>();
      wgmma_hold(o);
    } else {
      turn_end();
    }
    mbarrier_arrive(bars.empty((j - 1) % kStages));  // tile j - 1's K and V are no longer read
  }
  turn_begin();
  if (n <= group_tiles) {
    ops.issue_pv(o, p, n - 1);
    if (group == 0) turn_end();  // warpgroup 1's last turn has no successor
    wgmma_wait<0>();
    wgmma_hold(o);
  } else if (group == 0) {
    turn_end();
  }
}
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
  __nv_bfloat16* sm_k = sm_q + kRows * D;               // [kWsStages][kWsKeys * D]
  __nv_bfloat16* sm_v = sm_k + kWsStages * kTileElems;  // [kWsStages][kWsKeys * D]
  const StageBarriers<kWsStages> bars{smem_address(sm_v + kWsStages * kTileElems)};
  start_after_previous_grid();

  PrefillTile tile;
  if (!begin_warp_specialized_tile<D, kWsStages>(a, order, bars, tile)) return;
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
          if (j >= kWsStages) mbarrier_wait(bars.empty(stage), (j / kWsStages - 1) & 1);
          mbarrier_arrive_expect_tx(bars.full(stage), 2u * kTileElems * sizeof(__nv_bfloat16));
#pragma unroll
          for (int h = 0; h < kWsKeys / kTmaBoxKeys; ++h) {
            const int key = j * kWsKeys + h * kTmaBoxKeys;
            const int slot = (__ldg(table + (key >> shift)) << shift) | (key & mask);
#pragma unroll
            for (int dh = 0; dh < D / kPanelValues; ++dh) {
              const int offset = panel_offset(kWsKeys, h * kTmaBoxKeys, dh * kPanelValues / 8);
              tma_load_3d(smem_address(sm_k + stage * kTileElems + offset), &k_map, dh * kPanelValues, tile.kv_head,
                          slot, bars.full(stage));
              tma_load_3d(smem_address(sm_v + stage * kTileElems + offset), &v_map, dh * kPanelValues, tile.kv_head,
                          slot, bars.full(stage));
            }
          }
        }
      } else {  // a tile that runs past the sequence's end: zero-filled copies
        // Only thread 0 has waited for every earlier phase: a parity wait names only the last two.
        if (threadIdx.x == 0 && j >= kWsStages) mbarrier_wait(bars.empty(stage), (j / kWsStages - 1) & 1);
        copier_sync();
        loader.load(j, sm_k + stage * kTileElems, sm_v + stage * kTileElems);
        cp_async_commit();
        cp_async_wait<0>();
        fence_shared_for_wgmma();
        copier_sync();
        if (threadIdx.x == 0) mbarrier_arrive(bars.full(stage));
      }
    }
    return;
  }
  warpgroup_registers_up<232>();

  const ComputingThread me = computing_thread(tile);
  struct Ops {
    uint32_t q_addr, k0, v0;
    float scale;
    __device__ void score_scales(float (&scale_out)[2]) const { scale_out[0] = scale_out[1] = scale; }
    __device__ void issue_scores(float (&s)[kWsKeys / 8][4], int j) const {
      ::nanovllm::cuda::attention_detail::issue_scores<D, kWsKeys>(s, q_addr, k0 + (j % kWsStages) * kTileElems * 2);
    }
    __device__ void issue_pv(float (&o)[D / 8][4], const uint32_t (&p)[kWsKeys / 16][4], int j) const {
      ::nanovllm::cuda::attention_detail::issue_pv<D, kWsKeys>(o, p, v0 + (j % kWsStages) * kTileElems * 2);
    }
    __device__ void to_p(const float (&s)[kWsKeys / 8][4], uint32_t (&p)[kWsKeys / 16][4]) const {
#pragma unroll
      for (int kk = 0; kk < kWsKeys / 16; ++kk) p_fragment(s, kk, p[kk]);
    }
  };
  const Ops ops{smem_address(sm_q + me.group * kGroupRows * D), smem_address(sm_k), smem_address(sm_v),
                a.scale * kLog2e};

  float o[D / 8][4];
  SoftmaxRows softmax;
  warp_specialized_products<D, kWsKeys, kWsStages, 0, kWsKeys / 16>(tile, n, me, bars, o, softmax, ops);
  // Q is no longer read by this warpgroup's MMAs: each warp stages its output rows there.
  store_output<D, Layout, kCopyThreads / 32>(tile, o, softmax, a.out_scale, sm_q);
#endif
}

// The FP8-products kernel (an FP8 cache's long prompts, d = 128): the warp-specialised kernel's structure with both
// products on E4M3 tensor cores (twice the bf16 rate). K and V come from a packed copy of the launch's codes
// (pack_fp8_tiles in attention_prefill_fp8_shadow.cu): per (sequence, KV head), tiles of kFp8Keys keys, K as
// [key][128 codes] and V transposed as [value][128 keys], each 16 KB already in the 128-byte-swizzled layout, so
// one bulk copy lands each (wgmma reads 8-bit operands only K-major, and for P V the keys are the K dimension).
// Within each 16 keys the V tile's key order is permuted so that the S accumulators a thread holds are, as they
// stand, its E4M3 A fragment of P (fp8_pv_key_at). Q is quantised per row by the copying warpgroup (scale
// amax / 448, folded into the row's softmax scale with k_scale); P is scaled by 2^8 before its rounding, so that
// small weights keep E4M3's precision (the row sums carry the same factor); v_scale multiplies the output.
constexpr int kFp8Keys = kFp8TileKeys;
constexpr int kFp8Stages = 4;                  // 4 x 32 KB of K and V tiles
constexpr int kFp8TileBytes = kFp8Keys * 128;  // one operand tile: 128 rows of 128 codes
constexpr int kFp8WeightLog2 = 8;

// Q codes (two 64-row tiles), the K/V stages, the output staging (bf16, 128 rows), the row scales, the barriers.
constexpr size_t fp8_mma_smem_bytes() {
  return kSwizzleAtom + static_cast<size_t>(kRows) * 128 + static_cast<size_t>(kFp8Stages) * 2 * kFp8TileBytes +
         static_cast<size_t>(kRows) * 128 * sizeof(__nv_bfloat16) + kRows * sizeof(float) +
         2 * kFp8Stages * sizeof(uint64_t);
}

#ifdef NANOVLLM_WGMMA
// The weights of keys 32kk .. 32kk + 31 as an E4M3 A fragment. The thread holds, of each 8-key n-tile, keys 2t and
// 2t + 1: register 0 gets n-tiles 4kk and 4kk + 1 of row g (keys 2t, 2t + 1, 8 + 2t, 9 + 2t), which the fragment
// calls k = 4t .. 4t + 3; the V tile stores those keys at those k (fp8_pv_key_at).
template <int kN>
__device__ __forceinline__ void p_fragment_e4m3(const float (&s)[kN][4], int kk, uint32_t (&p)[4]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int nt = 4 * kk + 2 * half;
    p[2 * half] = fp8x4_from_floats(s[nt][0], s[nt][1], s[nt + 1][0], s[nt + 1][1]);
    p[2 * half + 1] = fp8x4_from_floats(s[nt][2], s[nt][3], s[nt + 1][2], s[nt + 1][3]);
  }
}

// Row r of the CTA's Q tile as E4M3 codes at `q_codes` (two 64-row tiles, 128-byte swizzle) with its scale; rows
// past q_len as zeros. One thread a row.
__device__ __forceinline__ void quantise_q_row(const PagedAttentionArgs& a, const PrefillTile& t, int r,
                                               uint8_t* q_codes, float* q_scale) {
  uint4 values[16];
  float amax = 0.f;
  const bool valid = t.row0 + r < t.q_len;
  const __nv_bfloat16* q =
      a.q + static_cast<size_t>(t.q_begin + t.row0 + r) * t.row_stride + static_cast<size_t>(t.head) * 128;
#pragma unroll
  for (int c = 0; c < 16; ++c) {
    values[c] = valid ? __ldg(reinterpret_cast<const uint4*>(q) + c) : make_uint4(0, 0, 0, 0);
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&values[c]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }
  const float scale = fp8_scale_for_amax(amax);
  const float inv = 1.f / scale;
#pragma unroll
  for (int chunk = 0; chunk < 8; ++chunk) {  // 16 codes from two 8-value loads
    uint32_t words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const auto* h = reinterpret_cast<const __nv_bfloat162*>(&values[2 * chunk + w / 2]) + 2 * (w % 2);
      const float2 lo = __bfloat1622float2(h[0]), hi = __bfloat1622float2(h[1]);
      words[w] = fp8x4_from_floats(lo.x * inv, lo.y * inv, hi.x * inv, hi.y * inv);
    }
    // The two 64-row tiles lie back to back: row r of the CTA is row r of one 128-row tile.
    *reinterpret_cast<uint4*>(q_codes + swizzled_byte_offset(r, chunk)) =
        make_uint4(words[0], words[1], words[2], words[3]);
  }
  q_scale[r] = scale;
}
#endif

__global__ void __launch_bounds__(kWsThreads, 1)
    prefill_fp8_mma_kernel(PagedAttentionArgs a, PrefillTileOrder order, const uint8_t* __restrict__ k_tiles,
                           const uint8_t* __restrict__ v_tiles, int tiles_per_seq) {
#ifdef NANOVLLM_WGMMA
  constexpr int D = 128;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_address(smem_raw);
  const uint32_t aligned = (raw + kSwizzleAtom - 1) & ~static_cast<uint32_t>(kSwizzleAtom - 1);
  uint8_t* sm_q = smem_raw + (aligned - raw);                                          // [2][64 rows][128 codes]
  uint8_t* sm_k = sm_q + kRows * 128;                                                  // [kFp8Stages][kFp8TileBytes]
  uint8_t* sm_v = sm_k + kFp8Stages * kFp8TileBytes;                                   // [kFp8Stages][kFp8TileBytes]
  auto* sm_out = reinterpret_cast<__nv_bfloat16*>(sm_v + kFp8Stages * kFp8TileBytes);  // [128 rows][D]
  auto* sm_q_scale = reinterpret_cast<float*>(sm_out + kRows * D);
  const StageBarriers<kFp8Stages> bars{smem_address(sm_q_scale + kRows)};
  start_after_previous_grid();

  PrefillTile tile;
  if (!begin_warp_specialized_tile<D, kFp8Stages>(a, order, bars, tile)) return;
  const int n = (tile.past + tile.last_row) / kFp8Keys + 1;

  if (threadIdx.x < kCopyThreads) {
    quantise_q_row(a, tile, static_cast<int>(threadIdx.x), sm_q, sm_q_scale);
    fence_shared_for_wgmma();
    asm volatile("bar.sync 3, %0;\n" ::"n"(kCopyThreads) : "memory");  // every Q row before tile 0's handover
    warpgroup_registers_down<40>();
    if (threadIdx.x == 0) {
      const size_t first = (static_cast<size_t>(tile.seq) * a.num_kv_heads + tile.kv_head) * tiles_per_seq;
      for (int j = 0; j < n; ++j) {
        const int stage = j % kFp8Stages;
        if (j >= kFp8Stages) mbarrier_wait(bars.empty(stage), (j / kFp8Stages - 1) & 1);
        mbarrier_arrive_expect_tx(bars.full(stage), 2u * kFp8TileBytes);
        const size_t offset = (first + j) * kFp8TileBytes;
        bulk_copy_to_shared(smem_address(sm_k + stage * kFp8TileBytes), k_tiles + offset, kFp8TileBytes,
                            bars.full(stage));
        bulk_copy_to_shared(smem_address(sm_v + stage * kFp8TileBytes), v_tiles + offset, kFp8TileBytes,
                            bars.full(stage));
      }
    }
    return;
  }
  warpgroup_registers_up<232>();

  const ComputingThread me = computing_thread(tile);
  struct Ops {
    uint32_t q_addr, k0, v0;
    uint32_t q_scale_byte;  // of this thread's row g in the dynamic shared memory; row g + 8 eight floats further
    float scale;            // a.scale x k_scale x log2(e)
    __device__ void score_scales(float (&scale_out)[2]) const {
      extern __shared__ unsigned char smem_raw[];
      const auto* q_scale = reinterpret_cast<const float*>(smem_raw + q_scale_byte);
      scale_out[0] = scale * q_scale[0];
      scale_out[1] = scale * q_scale[8];
    }
    __device__ void issue_scores(float (&s)[kFp8Keys / 8][4], int j) const {
      const uint32_t k_tile = k0 + (j % kFp8Stages) * kFp8TileBytes;
      wgmma_fence();
#pragma unroll
      for (int kc = 0; kc < D / 32; ++kc)
        wgmma_64x128_ss_e4m3(s, k_major_descriptor(q_addr, kGroupRows, kc), k_major_descriptor(k_tile, kFp8Keys, kc),
                             kc > 0);
      wgmma_commit();
    }
    __device__ void issue_pv(float (&o)[D / 8][4], const uint32_t (&p)[kFp8Keys / 32][4], int j) const {
      const uint32_t v_tile = v0 + (j % kFp8Stages) * kFp8TileBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kFp8Keys / 32; ++kk) wgmma_64x128_rs_e4m3(o, p[kk], k_major_descriptor(v_tile, D, kk));
      wgmma_commit();
    }
    __device__ void to_p(const float (&s)[kFp8Keys / 8][4], uint32_t (&p)[kFp8Keys / 32][4]) const {
#pragma unroll
      for (int kk = 0; kk < kFp8Keys / 32; ++kk) p_fragment_e4m3(s, kk, p[kk]);
    }
  };
  // The row scales are read once tile 0 is handed over: the copying warpgroup wrote them before.
  const Ops ops{
      smem_address(sm_q + me.group * kGroupRows * 128), smem_address(sm_k), smem_address(sm_v),
      static_cast<uint32_t>(reinterpret_cast<const unsigned char*>(sm_q_scale + me.warp * kWarpRows + me.g) - smem_raw),
      a.scale * a.k_scale * kLog2e};

  float o[D / 8][4];
  SoftmaxRows softmax;
  warp_specialized_products<D, kFp8Keys, kFp8Stages, kFp8WeightLog2, kFp8Keys / 32>(tile, n, me, bars, o, softmax, ops);
  store_output<D, PanelSwizzle<D>, kCopyThreads / 32>(tile, o, softmax, a.v_scale * a.out_scale, sm_out);
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

void launch_hopper_fp8_mma_prefill(const PagedAttentionArgs& a, const uint8_t* k_tiles, const uint8_t* v_tiles,
                                   int tiles_per_seq, cudaStream_t stream) {
  launch_prefill_grid<kRows, kWsThreads>("prefill_fp8_mma_kernel", prefill_fp8_mma_kernel, fp8_mma_smem_bytes(), a,
                                         stream, k_tiles, v_tiles, tiles_per_seq);
}

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
  return sm90a_code_runs_here() ? PrefillKernel::kWgmma : PrefillKernel::kMmaSync;
}

}  // namespace nanovllm::cuda
