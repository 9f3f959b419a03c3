#pragma once
// The skinny GEMM of decode batches too wide for the GEMV (sm_90 only): out[T, N] = x[T, K] · W[N, K]^T (+ bias[N]),
// bf16 in and out, fp32 accumulation, for 1 <= T <= kSkinnyGemmMaxTokens. Hopper's wgmma with the weight as the MMA's
// 64-row A operand and the tokens as its N, both operands copied by TMA into a ring of shared-memory stages, the
// weight's first stages before the programmatic-launch wait; K split over CTAs where the weight has too few 64-row
// tiles to fill the GPU, the last CTA of a tile adding the partial tiles in split order. docs/kernels/gemm_skinny.md
// has the design and the measurements. Nothing allocates or synchronises, so a launch may be captured into a graph.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/gemv.h"

namespace nanovllm::cuda {

inline constexpr int kSkinnyGemmMaxTokens = 256;
// Gemm::run sends it the calls of 17 rows up to skinny_gemm_route_max_tokens() that the GEMV does not take: 128 for
// weights of fewer than kSkinnyGemmSmallWeight elements (the fused SiLU's 2n x k), else 64. Past those cuBLASLt was as
// fast end to end, and routed above 64 rows Qwen3-8B's steps took 11% longer (H100; docs/kernels/gemm_skinny.md).
inline constexpr int kSkinnyGemmRouteMaxTokens = 64;
inline constexpr int kSkinnyGemmSmallWeightMaxTokens = 128;
inline constexpr int64_t kSkinnyGemmSmallWeight = int64_t{16} << 20;
constexpr int skinny_gemm_route_max_tokens(int64_t weight_elements) {
  return weight_elements < kSkinnyGemmSmallWeight ? kSkinnyGemmSmallWeightMaxTokens : kSkinnyGemmRouteMaxTokens;
}

// From 17 rows it also takes, before the GEMV, the calls whose weight has at least twice as many rows as columns
// (Qwen3-0.6B's qkv and fused gate_up, 4096 and 6144 x 1024): at 32 rows the GEMV took 5.9 and 10.1 us for them
// with the input norm folded, this kernel 4.7 and 5.6 unfolded, and a step with both here (folded) 8-10% less (H100).
// The narrow ones (o_proj, down) stay on the GEMV, whose residual fold was faster than this kernel's.
constexpr bool skinny_gemm_preferred_over_gemv(int tokens, int64_t weight_rows, int64_t k) {
  return tokens > kGemvMaxTokensAnyWeight && weight_rows >= 2 * k;
}

struct SkinnyGemmArgs {
  const __nv_bfloat16* x = nullptr;       // [tokens, k], 16-byte aligned
  const __nv_bfloat16* weight = nullptr;  // [n, k], 16-byte aligned
  const __nv_bfloat16* bias = nullptr;    // [n] or null
  __nv_bfloat16* out = nullptr;           // [tokens, n], 16-byte aligned
  int tokens = 0;
  int n = 0;
  int k = 0;
  // The MLP's gate_up and SiLU in one call: weight holds [gate; up], 2n rows, and out [tokens, n] = silu(x . gate^T) *
  // (x . up^T), the same bits as the plain call followed by silu_and_mul. No bias.
  bool swiglu = false;
  // A folded RMSNorm, one side a call, as the GEMV takes it (NormFoldParams, gemv.h). Only 64-row tiles fold.
  NormFoldParams norm{};
};

// The rows of its weight: n, or 2n with the fused SiLU.
inline int skinny_gemm_weight_rows(const SkinnyGemmArgs& a) { return a.swiglu ? 2 * a.n : a.n; }

// Device memory the K-split calls use. partials: fp32 scratch that no kernel running at the same time uses (the
// GEMM's cuBLASLt workspace does: calls of one stream run one after another); counters: one arrival count a
// 64-row tile, zero before the first call (each call leaves them zero again).
struct SkinnyGemmWorkspace {
  float* partials = nullptr;
  size_t partial_floats = 0;
  unsigned* counters = nullptr;
  int counter_count = 0;
};

// The same call as a GEMV's arguments (bf16 weight and out; the caller checks both).
inline SkinnyGemmArgs skinny_gemm_args(const GemvArgs& g) {
  return {g.x, g.weight, g.bias, static_cast<__nv_bfloat16*>(g.out), g.tokens, g.n, g.k, g.swiglu, g.norm};
}

// Why the kernel cannot take these arguments, or empty: a build with sm_90a code, 1 <= tokens <=
// kSkinnyGemmMaxTokens, k and n positive multiples of 8, x, weight and out 16-byte aligned, no bias with swiglu.
std::string skinny_gemm_unsupported_because(const SkinnyGemmArgs& args);

// How a call is cut into CTAs: tiles of tile_rows weight rows (64 or 128: one or two computing warpgroups) x
// token_tile tokens (32, 64 or 128), each tile's K split over `splits` CTAs (fewer where the workspace cannot hold
// the partial tiles or K has fewer 64-column tiles).
struct SkinnyGemmConfig {
  int tile_rows = 64;
  int token_tile = 64;
  int splits = 1;
};

// The configuration launch_skinny_gemm takes for sm_count SMs.
SkinnyGemmConfig skinny_gemm_config(const SkinnyGemmArgs& args, int sm_count);

// The splits a launch of this configuration runs (for tests and benchmarks).
int skinny_gemm_splits(const SkinnyGemmArgs& args, const SkinnyGemmWorkspace& workspace,
                       const SkinnyGemmConfig& config);

// Enqueues the GEMM on `stream` as a programmatic dependent launch where enabled (programmatic_launch.h); throws
// InvalidInput when the arguments or the configuration are unsupported or the current device is not sm_90.
void launch_skinny_gemm(const SkinnyGemmArgs& args, const SkinnyGemmWorkspace& workspace, int sm_count,
                        cudaStream_t stream);
void launch_skinny_gemm(const SkinnyGemmArgs& args, const SkinnyGemmWorkspace& workspace,
                        const SkinnyGemmConfig& config, cudaStream_t stream);

}  // namespace nanovllm::cuda
