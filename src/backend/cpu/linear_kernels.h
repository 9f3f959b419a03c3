#pragma once
// The two fp32 GEMM paths of CpuBackend::linear, shared with linear_fp8 so that an FP8 weight, dequantised,
// goes through the very same arithmetic as an fp32 weight (bit for bit the same results).
#include <cstdint>

#include "common/tensor.h"

namespace nanovllm::cpu {

// Up to this many tokens the streaming kernel beats sgemm (measured with bench_cpu_ops).
inline constexpr int64_t kMaxStreamingTokens = 8;
// Weight rows per OpenMP chunk of the streaming kernel: enough work per chunk, and chunks small enough to
// balance the threads.
inline constexpr int64_t kRowsPerChunk = 32;

// out[t, row] = x[t] · w[row] (+ bias[row]) for rows [row_begin, row_end) and `tokens` <= kMaxStreamingTokens
// tokens; w_rows points at row row_begin's weights ([row_end - row_begin, k] row-major), out is [tokens, n].
// A row's result depends only on its own weights and x, never on the other rows of the call.
void streaming_linear_rows(const float* x, const float* w_rows, const float* bias, float* out, int64_t tokens,
                           int64_t n, int64_t k, int64_t row_begin, int64_t row_end);

// out [tokens, n] = x [tokens, k] · w [n, k]^T (+ bias) through OpenBLAS's sgemm.
void sgemm_linear(const float* x, const float* w, const float* bias, float* out, int64_t tokens, int64_t n, int64_t k);

// Checks linear's x F32 [T, k], out F32 [T, n] and bias F32 [n] (or empty) for a weight of n rows of k; returns
// T and the bias (null when empty).
struct LinearOperands {
  int64_t tokens = 0;
  const float* bias = nullptr;
};
LinearOperands check_linear_operands(const char* op, const Tensor& x, int64_t n, int64_t k, const Tensor& bias,
                                     const Tensor& out);

}  // namespace nanovllm::cpu
