// The skinny GEMM (gemm_skinny.h; docs/kernels/gemm_skinny.md). CTA (tile, token tile, split) owns 64 or 128 weight
// rows (one or two computing warpgroups of 64), 32-128 tokens and the split's run of 64-column k-tiles. Its last
// warp's first lane copies each k-tile's weight box and x box with TMA into stage kt % kStages; each computing
// warpgroup takes a landed stage as four wgmma m64nTk16 (A = its 64 weight rows, B = the x box, both K-major with the
// 128-byte swizzle), so the accumulators hold its rows x tokens tile of out^T. A K-split CTA stores its tile as fp32
// partials and counts itself in; the tile's last CTA adds the partials in split order (the same sum whichever CTA is
// last). The epilogue adds the bias (or, with the fused SiLU, combines gate and up rows) and writes the tile through
// shared memory, 16 bytes of a token's outputs at a time.
#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_wgmma.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_skinny.h"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/programmatic_launch.cuh"
#include "backend/cuda/silu.cuh"
#include "backend/cuda/sm90a_code.h"
#include "backend/cuda/tensor_maps.h"
#include "common/error.h"

namespace nanovllm::cuda {
namespace {

using namespace attention_detail;  // NOLINT(google-build-using-namespace): the wgmma and mbarrier wrappers
using gemv_detail::NormFold;

constexpr int kTileK = kPanelValues;  // one 128-byte swizzled panel a k-tile
constexpr int kGroupRows = 64;        // weight rows a computing warpgroup owns: the wgmma's M
// The ring stays under ~96 KiB so that a CTA fits the decode step's shared split (programmatic_launch.h).
constexpr int kRingBytes = 96 << 10;

// A CTA of kGroups computing warpgroups (64 weight rows each) over kTokens tokens, and one copying warp.
template <int kTokens, int kGroups>
struct Layout {
  static constexpr int kRows = kGroupRows * kGroups;
  static constexpr int kComputeThreads = 128 * kGroups;
  static constexpr int kThreads = kComputeThreads + 32;
  static constexpr int kWeightBoxBytes = kRows * kTileK * 2;
  static constexpr int kStageBytes = kWeightBoxBytes + kTokens * kTileK * 2;
  static constexpr int kStages = std::min(8, kRingBytes / kStageBytes);
  // The output tile staged for the stores at the ring's start: kTokens rows of kRows outputs, 16 bytes of padding.
  static constexpr int kOutRowBytes = kRows * 2 + 16;
  static constexpr int kBarrierOffset = kStages * kStageBytes;
  static constexpr int kFlagOffset = kBarrierOffset + 2 * kStages * 8;
  static constexpr int kInvRmsOffset = kFlagOffset + 16;  // a folded input norm's 1 / rms of each token
  static constexpr size_t kSharedBytes = kInvRmsOffset + kTokens * 4 + kSwizzleAtom;  // + the alignment of the ring
  static_assert(kTokens * kOutRowBytes <= kStages * kStageBytes, "the output tile fits in the ring");
  static_assert(kStages >= 2, "a ring");
};

template <int kThreadCount>
__device__ __forceinline__ void compute_threads_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kThreadCount) : "memory");
}

template <int kTokens>
__device__ __forceinline__ void wgmma_tile(float (&acc)[kTokens / 8][4], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (kTokens == 32) wgmma_64x32_ss(acc, a, b, accumulate);
  if constexpr (kTokens == 64) wgmma_64x64_ss(acc, a, b, accumulate);
  if constexpr (kTokens == 128) wgmma_64x128_ss(acc, a, b, accumulate);
}

// Grid: (output tiles of kOutRows, token tiles of kTokens, K splits of tiles_per_split k-tiles). kSwiglu: the tile's
// weight rows are its kOutRows gate rows and the up rows of the same outputs (n further down the weight), copied as
// two boxes, and the epilogue writes SiLU(gate) x up. kNorm: a folded RMSNorm's side (gemv.h's GemvArgs): each
// product scaled by its token's 1 / rms before the bias or SiLU, or the residual added and the next norm's sums.
template <int kTokens, int kGroups, bool kSwiglu, NormFold kNorm>
__global__ void __launch_bounds__(Layout<kTokens, kGroups>::kThreads, 1)
    skinny_gemm_kernel(const __grid_constant__ CUtensorMap weight_map, const __grid_constant__ CUtensorMap x_map,
                       const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* __restrict__ out,
                       float* __restrict__ partials, unsigned* __restrict__ counters, int tokens, int n, int k,
                       int k_tiles, int tiles_per_split, NormFoldParams norm) {
#ifdef NANOVLLM_WGMMA
  using L = Layout<kTokens, kGroups>;
  constexpr int kStages = L::kStages;
  constexpr int kNTiles = kTokens / 8;
  constexpr int kRegs = kNTiles * 4;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_address(smem_raw);
  const uint32_t ring = (raw + kSwizzleAtom - 1) & ~static_cast<uint32_t>(kSwizzleAtom - 1);
  unsigned char* ring_ptr = smem_raw + (ring - raw);
  const auto full = [&](int s) { return ring + L::kBarrierOffset + 8 * s; };
  const auto empty = [&](int s) { return ring + L::kBarrierOffset + 8 * (kStages + s); };
  const auto weight_box = [&](int s) { return ring + s * L::kStageBytes; };
  const auto x_box = [&](int s) { return ring + s * L::kStageBytes + L::kWeightBoxBytes; };

  constexpr int kOutRows = kSwiglu ? L::kRows / 2 : L::kRows;
  const int row0 = static_cast<int>(blockIdx.x) * kOutRows;  // its first output
  const int token0 = static_cast<int>(blockIdx.y) * kTokens;
  const int split = static_cast<int>(blockIdx.z);
  const int splits = static_cast<int>(gridDim.z);
  const int tile = static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x);
  const int kt0 = split * tiles_per_split;
  const int count = min(k_tiles, kt0 + tiles_per_split) - kt0;  // >= 1: the host makes no empty split
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), L::kComputeThreads);
    }
  }
  __syncthreads();
  allow_next_grid();

  if (threadIdx.x >= L::kComputeThreads) {  // the copying warp: one lane issues every copy
    if (threadIdx.x != L::kComputeThreads) return;
    constexpr uint32_t kStageTx = L::kStageBytes;
    const int first = min(count, kStages);
    const auto load_weight = [&](int s, int kt) {
      tma_load_2d(weight_box(s), &weight_map, (kt0 + kt) * kTileK, row0, full(s));
      if constexpr (kSwiglu)
        tma_load_2d(weight_box(s) + kOutRows * 128, &weight_map, (kt0 + kt) * kTileK, n + row0, full(s));
    };
    // The weight is constant: its first stages are requested before the previous kernel has finished.
    for (int s = 0; s < first; ++s) {
      mbarrier_arrive_expect_tx(full(s), kStageTx);
      load_weight(s, s);
    }
    wait_for_previous_grid();
    for (int s = 0; s < first; ++s) tma_load_2d(x_box(s), &x_map, (kt0 + s) * kTileK, token0, full(s));
    for (int kt = first; kt < count; ++kt) {
      const int s = kt % kStages;
      mbarrier_wait(empty(s), (kt / kStages - 1) & 1);
      mbarrier_arrive_expect_tx(full(s), kStageTx);
      load_weight(s, kt);
      tma_load_2d(x_box(s), &x_map, (kt0 + kt) * kTileK, token0, full(s));
    }
    return;
  }

  wait_for_previous_grid();  // before any store: the previous kernel may still read out or the partials
  const int tid = static_cast<int>(threadIdx.x);
  auto* inv_rms = reinterpret_cast<float*>(ring_ptr + L::kInvRmsOffset);
  if constexpr (kNorm == NormFold::kScaleByInputRms) {
    // Written before the epilogue's first barrier, read after it.
    if (tid < kTokens && token0 + tid < tokens) {
      const GemvNormSum& sum = norm.input_sum_squares[token0 + tid];
      inv_rms[tid] = rsqrtf(gemv_detail::norm_sum_value(sum.whole, sum.fraction) / static_cast<float>(k) + norm.eps);
    }
  }
  if constexpr (kNorm == NormFold::kAddResidual) {
    // An earlier norm's sums, all of whose readers have run, are zeroed for their next use (gemv.h).
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
      for (int i = tid; i < norm.stale_sum_count; i += L::kComputeThreads) {
        norm.stale_sums[i].whole = 0;
        norm.stale_sums[i].fraction = 0;
      }
    }
  }
  const int group = tid / 128;  // its 64 rows of the CTA's
  float acc[kNTiles][4] = {};
  for (int kt = 0; kt < count; ++kt) {
    const int s = kt % kStages;
    mbarrier_wait(full(s), (kt / kStages) & 1);
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < kTileK / 16; ++kc) {
      wgmma_tile<kTokens>(acc, k_major_descriptor(weight_box(s) + group * kGroupRows * 128, kGroupRows, kc),
                          k_major_descriptor(x_box(s), kTokens, kc), kt > 0 || kc > 0);
    }
    wgmma_commit();
    // One k-tile's MMAs stay in flight while the next stage is awaited; the stage before is then free.
    wgmma_wait<1>();
    wgmma_hold(acc);
    if (kt > 0) mbarrier_arrive(empty((kt - 1) % kStages));
  }
  wgmma_wait<0>();
  wgmma_hold(acc);

  if (splits > 1) {
    // Each split's partial tile: register i of thread tid at (i * threads + tid), coalesced, and read back alike.
    constexpr int kT = L::kComputeThreads;
    float* tile_partials = partials + static_cast<size_t>(tile) * splits * kRegs * kT;
    float* mine = tile_partials + static_cast<size_t>(split) * kRegs * kT;
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) __stcg(mine + (4 * j + e) * kT + tid, acc[j][e]);
    }
    __threadfence();
    compute_threads_sync<kT>();
    auto* last_flag = reinterpret_cast<volatile int*>(ring_ptr + L::kFlagOffset);
    if (tid == 0) *last_flag = atomicAdd(counters + tile, 1u) == static_cast<unsigned>(splits - 1);
    compute_threads_sync<kT>();
    if (!*last_flag) return;
    __threadfence();  // the other splits' partials, counted in before this CTA, are visible
    // The sum in split order whichever CTA is last; each split's registers are loaded at once.
    float sum[kNTiles][4];
    for (int p = 0; p < splits; ++p) {
      const float* part = tile_partials + static_cast<size_t>(p) * kRegs * kT + tid;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = p == split ? acc[j][e] : __ldcg(part + (4 * j + e) * kT);
          sum[j][e] = p == 0 ? v : sum[j][e] + v;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = sum[j][e];
    }
    if (tid == 0) counters[tile] = 0;  // for the next call
  }

  // The tile (+ bias) as bf16 at the ring's start, token-major, then 16-byte stores of each token's outputs (with
  // kSwiglu, SiLU(gate) x up of the rounded values, as silu_and_mul computes it).
  compute_threads_sync<L::kComputeThreads>();  // every warp's MMAs have read the ring
  const int warp = (tid % 128) / 32, g = (tid % 32) >> 2, t = tid % 4;
  float bias_of[2] = {0.0f, 0.0f};
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + group * kGroupRows + 16 * warp + g + 8 * h;
    if (bias != nullptr && row < n) bias_of[h] = __bfloat162float(bias[row]);
  }
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = group * kGroupRows + 16 * warp + g + 8 * (e / 2), c = 8 * j + 2 * t + (e % 2);
      const float scale = kNorm == NormFold::kScaleByInputRms && token0 + c < tokens ? inv_rms[c] : 1.0f;
      *reinterpret_cast<__nv_bfloat16*>(ring_ptr + c * L::kOutRowBytes + r * 2) =
          __float2bfloat16(acc[j][e] * scale + bias_of[e / 2]);
    }
  }
  compute_threads_sync<L::kComputeThreads>();
  constexpr int kChunksPerToken = kOutRows / 8;
  for (int i = tid; i < kTokens * kChunksPerToken; i += L::kComputeThreads) {
    const int c = i / kChunksPerToken, chunk = i % kChunksPerToken;
    const int row = row0 + chunk * 8;
    if (token0 + c >= tokens || row >= n) continue;  // n % 8 == 0: a chunk is all in or all out
    const unsigned char* staged = ring_ptr + c * L::kOutRowBytes + chunk * 16;
    uint4 value = *reinterpret_cast<const uint4*>(staged);
    const size_t at = static_cast<size_t>(token0 + c) * n + row;
    if constexpr (kSwiglu) {
      const uint4 up = *reinterpret_cast<const uint4*>(staged + kOutRows * 2);
      auto* g = reinterpret_cast<__nv_bfloat162*>(&value);
      const auto* u = reinterpret_cast<const __nv_bfloat162*>(&up);
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float2 gf = __bfloat1622float2(g[p]), uf = __bfloat1622float2(u[p]);
        g[p] = __floats2bfloat162_rn(silu_mul(gf.x, uf.x), silu_mul(gf.y, uf.y));
      }
    }
    if constexpr (kNorm == NormFold::kAddResidual) {
      // As add_rms_norm: the rounded output added to the residual, the sum rounded; the 8 rows' squares are one piece
      // of the token's sum (fixed point, so the total does not depend on the order pieces arrive in).
      const uint4 residual_in = *reinterpret_cast<const uint4*>(norm.residual + at);
      const uint4 weight = *reinterpret_cast<const uint4*>(norm.norm_weight + row);
      const auto* o = reinterpret_cast<const __nv_bfloat16*>(&value);
      const auto* r = reinterpret_cast<const __nv_bfloat16*>(&residual_in);
      const auto* w = reinterpret_cast<const __nv_bfloat16*>(&weight);
      uint4 residual_out, normed;
      auto* ro = reinterpret_cast<__nv_bfloat16*>(&residual_out);
      auto* no = reinterpret_cast<__nv_bfloat16*>(&normed);
      float square = 0.0f;
#pragma unroll
      for (int v = 0; v < 8; ++v) {
        const float h = gemv_detail::round_to_bf16(__bfloat162float(r[v]) + __bfloat162float(o[v]));
        ro[v] = __float2bfloat16_rn(h);
        no[v] = __float2bfloat16_rn(h * __bfloat162float(w[v]));
        square += h * h;
      }
      *reinterpret_cast<uint4*>(norm.residual + at) = residual_out;
      value = normed;
      gemv_detail::add_norm_sum_piece(norm.sum_squares + token0 + c, square);
    }
    *reinterpret_cast<uint4*>(out + at) = value;
  }
#endif
}

int tiles_of(int extent, int tile) { return (extent + tile - 1) / tile; }

// The launch's grid for a configuration: splits reduced until the workspace holds the partials (and no split is
// empty).
struct Grid {
  int row_tiles, token_tiles, k_tiles, splits, tiles_per_split;
};

Grid grid_for(const SkinnyGemmArgs& a, const SkinnyGemmWorkspace& w, const SkinnyGemmConfig& c) {
  Grid g{};
  g.row_tiles = tiles_of(skinny_gemm_weight_rows(a), c.tile_rows);
  g.token_tiles = tiles_of(a.tokens, c.token_tile);
  g.k_tiles = tiles_of(a.k, kTileK);
  int splits = std::clamp(c.splits, 1, g.k_tiles);
  const size_t tiles = static_cast<size_t>(g.row_tiles) * g.token_tiles;
  const size_t tile_floats = static_cast<size_t>(c.tile_rows) * c.token_tile;
  while (splits > 1 &&
         (tiles > static_cast<size_t>(w.counter_count) || splits * tiles * tile_floats > w.partial_floats))
    --splits;
  g.tiles_per_split = tiles_of(g.k_tiles, splits);
  g.splits = tiles_of(g.k_tiles, g.tiles_per_split);
  return g;
}

// The kernel for these arguments' SiLU and folded norm (only 64-row tiles fold a norm).
template <int kTokens, int kGroups>
auto kernel_for(const SkinnyGemmArgs& a) {
  const NormFold fold = gemv_detail::norm_fold_of(a.norm);
  if constexpr (kGroups == 1) {
    if (fold == NormFold::kAddResidual) return skinny_gemm_kernel<kTokens, 1, false, NormFold::kAddResidual>;
    if (fold == NormFold::kScaleByInputRms) {
      return a.swiglu ? skinny_gemm_kernel<kTokens, 1, true, NormFold::kScaleByInputRms>
                      : skinny_gemm_kernel<kTokens, 1, false, NormFold::kScaleByInputRms>;
    }
  }
  return a.swiglu ? skinny_gemm_kernel<kTokens, kGroups, true, NormFold::kNone>
                  : skinny_gemm_kernel<kTokens, kGroups, false, NormFold::kNone>;
}

template <int kTokens, int kGroups>
void launch(const SkinnyGemmArgs& a, const SkinnyGemmWorkspace& w, const Grid& g, cudaStream_t stream) {
  using L = Layout<kTokens, kGroups>;
  auto kernel = kernel_for<kTokens, kGroups>(a);
  allow_dynamic_smem(kernel, L::kSharedBytes, "skinny_gemm");
  // With the fused SiLU a tile is two boxes of half its rows (gate and up).
  const CUtensorMap weight_map =
      matrix_tensor_map(a.weight, skinny_gemm_weight_rows(a), a.k, a.swiglu ? L::kRows / 2 : L::kRows);
  const CUtensorMap x_map = matrix_tensor_map(a.x, a.tokens, a.k, kTokens);
  launch_programmatic(
      "skinny_gemm_kernel", kernel,
      dim3(static_cast<unsigned>(g.row_tiles), static_cast<unsigned>(g.token_tiles), static_cast<unsigned>(g.splits)),
      dim3(L::kThreads), L::kSharedBytes, stream, weight_map, x_map, a.bias, a.out, w.partials, w.counters, a.tokens,
      a.n, a.k, g.k_tiles, g.tiles_per_split, a.norm);
}

template <int kGroups>
void launch_with_tokens(const SkinnyGemmArgs& a, const SkinnyGemmWorkspace& w, const SkinnyGemmConfig& c,
                        cudaStream_t stream) {
  const Grid g = grid_for(a, w, c);
  if (c.token_tile == 32) return launch<32, kGroups>(a, w, g, stream);
  if (c.token_tile == 64) return launch<64, kGroups>(a, w, g, stream);
  launch<128, kGroups>(a, w, g, stream);
}

std::string config_unsupported_because(const SkinnyGemmConfig& c) {
  if (c.tile_rows != 64 && c.tile_rows != 128) return "tile_rows " + std::to_string(c.tile_rows) + " is not 64 or 128";
  if (c.token_tile != 32 && c.token_tile != 64 && c.token_tile != 128)
    return "token_tile " + std::to_string(c.token_tile) + " is not 32, 64 or 128";
  if (c.splits < 1) return "splits " + std::to_string(c.splits) + " is below 1";
  return {};
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

std::string skinny_gemm_unsupported_because(const SkinnyGemmArgs& a) {
  if (!sm90a_code_built()) return "this build has no sm_90a code";
  if (a.tokens < 1 || a.tokens > kSkinnyGemmMaxTokens)
    return "tokens " + std::to_string(a.tokens) + " outside 1.." + std::to_string(kSkinnyGemmMaxTokens);
  if (a.n < 8 || a.n % 8 != 0 || a.k < 8 || a.k % 8 != 0)
    return "n and k must be positive multiples of 8 (n " + std::to_string(a.n) + ", k " + std::to_string(a.k) + ")";
  if (a.swiglu && a.bias != nullptr) return "the fused SiLU takes no bias";
  const NormFoldParams& f = a.norm;
  if (f.residual != nullptr && (a.swiglu || a.bias != nullptr || f.input_sum_squares != nullptr ||
                                f.norm_weight == nullptr || f.sum_squares == nullptr))
    return "the residual's call takes a norm weight and sums, and no bias, SiLU or input norm";
  if (f.residual != nullptr && (!aligned16(f.residual) || !aligned16(f.norm_weight)))
    return "residual and norm weight must be 16-byte aligned";
  if (f.stale_sum_count > 0 && f.residual == nullptr) return "stale sums are zeroed by the residual's call only";
  if (a.x == nullptr || a.weight == nullptr || a.out == nullptr || !aligned16(a.x) || !aligned16(a.weight) ||
      !aligned16(a.out))
    return "x, weight and out must be 16-byte aligned device pointers";
  return {};
}

SkinnyGemmConfig skinny_gemm_config(const SkinnyGemmArgs& a, int sm_count) {
  // From bench_gemv's sweep of Qwen3-0.6B's and -8B's projections at 17-256 tokens (H100; docs/kernels/gemm_skinny.md):
  // 64-row tiles of 32 tokens where that grid is at most half a wave (more CTAs stream the weight, but each reads x
  // again), else of 64 tokens up to 64 tokens or while one wave holds them; past that 128-token tiles, of 128 rows
  // where 64-row ones would take more than a wave. K is split only while the grid stays one wave and each split
  // keeps at least 10 k-tiles (a split costs ~1 us of partial stores, counting and reloading), at most 3 ways.
  const int sms = std::max(sm_count, 1);
  const int row_tiles = tiles_of(skinny_gemm_weight_rows(a), 64);
  SkinnyGemmConfig c{64, 128, 1};
  if (a.tokens <= 32 || row_tiles * tiles_of(a.tokens, 32) <= sms / 2) {
    c.token_tile = 32;
  } else if (a.tokens <= 64 || row_tiles * tiles_of(a.tokens, 64) <= sms) {
    c.token_tile = 64;
  } else if (row_tiles * tiles_of(a.tokens, 128) > sms) {
    c.tile_rows = 128;
  }
  const int ctas = tiles_of(skinny_gemm_weight_rows(a), c.tile_rows) * tiles_of(a.tokens, c.token_tile);
  c.splits = std::clamp(std::min(sms / ctas, tiles_of(a.k, kTileK) / 10), 1, 3);
  return c;
}

int skinny_gemm_splits(const SkinnyGemmArgs& a, const SkinnyGemmWorkspace& w, const SkinnyGemmConfig& c) {
  return grid_for(a, w, c).splits;
}

void launch_skinny_gemm(const SkinnyGemmArgs& a, const SkinnyGemmWorkspace& w, int sm_count, cudaStream_t stream) {
  launch_skinny_gemm(a, w, skinny_gemm_config(a, sm_count), stream);
}

void launch_skinny_gemm(const SkinnyGemmArgs& a, const SkinnyGemmWorkspace& w, const SkinnyGemmConfig& c,
                        cudaStream_t stream) {
  if (const std::string why = skinny_gemm_unsupported_because(a); !why.empty())
    throw InvalidInput("skinny_gemm: unsupported call tokens=" + std::to_string(a.tokens) +
                       " n=" + std::to_string(a.n) + " k=" + std::to_string(a.k) + ": " + why);
  if (const std::string why = config_unsupported_because(c); !why.empty())
    throw InvalidInput("skinny_gemm: unsupported configuration: " + why);
  if (!sm90a_code_runs_here())
    throw InvalidInput("skinny_gemm: the current device is not sm_90 (the kernel is sm_90a code)");
  const bool folds = gemv_detail::norm_fold_of(a.norm) != NormFold::kNone;
  if (c.tile_rows == 128 && !folds) return launch_with_tokens<2>(a, w, c, stream);
  if (c.tile_rows == 128) return launch_with_tokens<1>(a, w, {64, c.token_tile, c.splits}, stream);
  launch_with_tokens<1>(a, w, c, stream);
}

}  // namespace nanovllm::cuda
