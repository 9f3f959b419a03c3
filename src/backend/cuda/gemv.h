#pragma once
// Skinny linear for small token counts: out[T, N] = x[T, K] · W[N, K]^T (+ bias[N]), bf16 inputs, fp32
// accumulation, bf16 or fp32 output. A weight-streaming kernel (W read exactly once, 16-byte loads, many in
// flight) that beats cuBLASLt's fixed cost at decode sizes; docs/kernels/gemv.md has the design and numbers.
// Nothing allocates or synchronises, so a launch may be captured into a CUDA graph.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/dtype.h"

namespace nanovllm::cuda {

// Gemm::run sends calls with M (tokens) up to kGemvMaxTokensAnyWeight to the GEMV (except shapes it measured faster
// on cuBLASLt), and up to kGemvMaxTokens where the weight is bf16 and under kGemvMaxWideWeight elements; the rest
// to cuBLASLt. The kernel's math does not grow with T up to 16 (the token dimension is the mma's M = 16); from 17
// to 32 tokens every weight fragment feeds two mmas, and every CTA reads twice the x. Against cuBLASLt at 24 and 32
// rows (H100, bench_gemv) that won on Qwen3-0.6B's projections (o_proj 5.6 -> 4.4 us, down 7.3 -> 5.9, qkv even)
// and lost on every Qwen3-8B projection (o_proj, 16.8 M elements: 14.2 -> 15.6; gate_up 73.8 -> 78.0).
inline constexpr int kGemvMaxTokens = 32;
inline constexpr int kGemvMaxTokensAnyWeight = 16;
inline constexpr int64_t kGemvMaxWideWeight = int64_t{16} << 20;

// A row's sum of squares as the folded norm's calls add it up: every 8-row piece of the sum is added atomically
// as two integers, its whole part and its fraction in units of 2^-40, so the total does not depend on the order
// the CTAs add in (batch invariance) and covers squares from 2^-40 to 2^52 a piece. Bit 63 of `whole` says a
// piece was not finite (or above that range): the rms is then NaN, as the unfolded norm's would be. Each word has
// a 128-byte line of its own: atomics on one line are served one after another, and a grid's last CTAs add theirs
// at once, so with the 16 tokens' words packed into two lines Qwen3-8B's o_proj took ~1 us longer (H100).
struct alignas(128) GemvNormSum {
  unsigned long long whole;
  unsigned long long whole_line[15];  // unused
  unsigned long long fraction;
  unsigned long long fraction_line[15];  // unused
};

// The widest norm the call before it takes: 2048 pieces of at most 2^52 keep `whole` under 2^63.
inline constexpr int kGemvMaxNormWidth = 16384;

// An RMSNorm folded into the linears around it (docs/kernels/gemv.md), one side a call (GemvArgs, and the skinny
// GEMM's arguments):
// - The call before the norm (residual set): each output is added to residual [tokens, n], rounded to bf16 as
//   add_rms_norm rounds it; out = bf16(residual * norm_weight [n]); and the new residual's sum of squares is added
//   to sum_squares [tokens] (fixed point, GemvNormSum), which must be zero when the call starts. The call also
//   zeroes stale_sums [stale_sum_count], the sums of an earlier norm whose readers have all run (it writes them
//   after the previous kernel has completed). BF16 out, no bias, no swiglu, n % 8 == 0, n <= kGemvMaxNormWidth.
// - The call after it (input_sum_squares set): x is such an out and input_sum_squares [tokens] that call's sums;
//   each product is multiplied by 1 / rms = rsqrt(sum / k + eps) before the bias (or the SiLU) is applied. BF16
//   out. Every GemvNormSum pointer is at the type's alignment.
struct NormFoldParams {
  __nv_bfloat16* residual = nullptr;
  const __nv_bfloat16* norm_weight = nullptr;
  GemvNormSum* sum_squares = nullptr;
  GemvNormSum* stale_sums = nullptr;
  int stale_sum_count = 0;
  const GemvNormSum* input_sum_squares = nullptr;
  float eps = 0.0f;
};

struct GemvArgs {
  const __nv_bfloat16* x = nullptr;       // [tokens, k], 16-byte aligned
  const __nv_bfloat16* weight = nullptr;  // [n, k], 16-byte aligned (or null: weight_fp8)
  const __nv_bfloat16* bias = nullptr;    // [n] or null
  void* out = nullptr;                    // [tokens, n] of out_dtype
  DType out_dtype = DType::BF16;          // BF16 or F32
  int tokens = 0;
  int n = 0;
  int k = 0;
  // Instead of weight, Qwen's block-scaled FP8: codes [n, k] (16-byte aligned), element (i, j) = code *
  // block_scale[i / 128, j / 128] with block_scale F32 [ceil(n / 128), ceil(k / 128)].
  const uint8_t* weight_fp8 = nullptr;
  const float* block_scale = nullptr;
  // The MLP's gate_up and SiLU in one call: weight (or weight_fp8) holds [gate; up], 2n rows, and out [tokens, n]
  // = silu(x . gate^T) * (x . up^T), the same bits as the plain call followed by silu_and_mul. Needs n % 16 == 0,
  // no bias, BF16 out, and FP8 codes of under 32 M elements (2n x k).
  bool swiglu = false;
  // An RMSNorm folded into the calls around it (NormFoldParams above), one side per call.
  NormFoldParams norm{};
};

// The most rows the GEMV takes for a weight of weight_elements elements (the fused SiLU's 2n x k), bf16 or FP8 codes:
// kGemvMaxTokens or kGemvMaxTokensAnyWeight (above says why).
int gemv_max_tokens(int64_t weight_elements, bool fp8_codes);

// Whether folding the norms into the GEMVs pays at this many tokens, the largest weight of the layer being
// largest_weight_elements. Not for FP8 codes of weights of kGemvFp8UnfoldedMinWeight elements or more at up to
// kGemvFp8UnfoldedMaxTokens tokens, which measured faster unfolded (likely because their grids are many waves of
// small CTAs, each paying the fold's reads and epilogue; not profiled): Qwen3-8B's FP8 batch 1 2.97 ms/token
// unfolded against 3.05 folded, batch 4 3.14 against 3.20, batch 16 3.77 against 3.74; Qwen3-0.6B's batch 1 0.73
// against 0.65 (H200, docs/kernels/gemv.md).
inline constexpr int64_t kGemvFp8UnfoldedMinWeight = int64_t{16} << 20;
inline constexpr int kGemvFp8UnfoldedMaxTokens = 4;
constexpr bool gemv_norm_fold_pays(int64_t tokens, int64_t largest_weight_elements, bool fp8_codes) {
  return !fp8_codes || largest_weight_elements < kGemvFp8UnfoldedMinWeight || tokens > kGemvFp8UnfoldedMaxTokens;
}

// True when the GEMV handles these arguments: 1 <= tokens <= kGemvMaxTokensAnyWeight (up to kGemvMaxTokens for bf16
// weights of fewer than kGemvMaxWideWeight elements, the fused SiLU's 2n x k), n >= 1, k a positive multiple
// of 8 (16 for FP8 codes with their scales), x and weight 16-byte aligned, out_dtype BF16 or F32. Any n (but
// see swiglu).
bool gemv_supports(const GemvArgs& args);

// What gemv_supports asks of calls like these arguments, in words (for error messages).
std::string gemv_requirements(const GemvArgs& args);

// The token slices (the grid's second dimension) launch_gemv runs these arguments in for sm_count SMs: 2 above 16
// tokens where the call's grid would leave SMs idle (gemv.cu's layout_for), else 1. For tests and benchmarks.
int gemv_token_slices(const GemvArgs& args, int sm_count);

// Enqueues the GEMV on `stream`; throws InvalidInput when !gemv_supports(args). sm_count: the device's
// multiprocessor count (sizes the grid). Launched as a programmatic dependent launch where enabled
// (programmatic_launch.h): its CTAs may start, and stream their first weights, while the previous kernel of
// the stream finishes; they read x and write out only after that kernel has completed.
// Large weights at one or two tokens go to the streamed kernel on sm_90 (gemv_streamed.h), the rest to the kernel of
// gemv.cu.
void launch_gemv(const GemvArgs& args, int sm_count, cudaStream_t stream);
// gemv.cu's kernel whatever the weight (benchmarks compare the two; tests cover both).
void launch_gemv_rounds(const GemvArgs& args, int sm_count, cudaStream_t stream);

}  // namespace nanovllm::cuda
