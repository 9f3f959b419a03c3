#pragma once
// The skinny linear of gemv.h for large weights: one persistent CTA an SM whose copying warp streams the SM's
// contiguous share of the weight rows into a ring of shared-memory stages with bulk copies, while its computing warps
// multiply each stage as it lands. An SM's copies so never pause between CTAs or rounds, as the one-round CTAs of
// gemv.cu's kernel do once a wave (docs/kernels/gemv.md, "Streamed"). launch_gemv sends it the calls
// gemv_streamed_takes; sm_90a only (bulk copies and mbarriers). Nothing allocates or synchronises, so a launch may
// be graph-captured.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv.h"

namespace nanovllm::cuda {

// The most tokens the kernel takes: one mma tile of 16.
inline constexpr int kGemvStreamedMaxTokens = 16;
// Which calls launch_gemv streams: weights of at least kGemvStreamedMinWeight elements (the fused SiLU's 2n x k) with
// rows of at least kGemvStreamedMinK, at up to kGemvStreamedRouteMaxTokens tokens. Qwen3-8B's projections and lm_head
// are faster streamed from 1 to 4 tokens (bench_gemv and batch decode, H100 and H200); Qwen3-0.6B's (under 16 M
// elements; its lm_head's rows of 1,024 fill two thirds of a stage) are not. At 8 tokens Qwen3-8B's down projection
// (k = 12,288: every CTA rereads 8 tokens' x) was slower on an H200 and batch-8 decode even on an H100.
inline constexpr int64_t kGemvStreamedMinWeight = int64_t{16} << 20;
inline constexpr int kGemvStreamedMinK = 2048;
inline constexpr int kGemvStreamedRouteMaxTokens = 4;

// True when this build has the kernel (sm_90a code) and gemv_supports(args) with bf16 weights and at most
// kGemvStreamedMaxTokens tokens: any fused SiLU, folded norm, bias and output type gemv_supports allows.
bool gemv_streamed_supports(const GemvArgs& args);

// Whether launch_gemv streams this call: gemv_streamed_supports, the bounds above, and sm90a_code_runs_here().
bool gemv_streamed_takes(const GemvArgs& args);

// launch_gemv's side: enqueues the call streamed and returns true where gemv_streamed_takes(args), else does nothing.
bool launch_gemv_streamed_if_taken(const GemvArgs& args, int sm_count, cudaStream_t stream);

// Enqueues the streamed GEMV on min(sm_count, groups of 8 outputs) CTAs; throws InvalidInput when
// !gemv_streamed_supports(args) or !sm90a_code_runs_here(). Launched as a programmatic dependent launch where
// enabled: the weights stream before the wait for the previous kernel, x, the residual and the norm's sums are read
// after it.
void launch_gemv_streamed(const GemvArgs& args, int sm_count, cudaStream_t stream);

}  // namespace nanovllm::cuda
