// out [T, N] = x [T, K] · weight [N, K]ᵀ (+ bias). Large T goes to OpenBLAS's sgemm. Small T (decode) uses a
// kernel that streams each weight row once and dots it with every token: at that size the weights' bytes
// bound the time, and OpenBLAS 0.3.21's sgemm would first copy (pack) the whole weight matrix.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/vector_kernels.h"

namespace nanovllm {

namespace cpu {
namespace {

// A tile of kRows weight rows times kTokens tokens: each 8-float slice of a weight row is loaded once and
// multiplied into every token, with all kRows * kTokens accumulators in registers.
template <int kTokens, int kRows>
NANOVLLM_CPU_INLINE void linear_tile(const float* x, const float* w, const float* bias, float* out, int64_t n,
                                     int64_t k, int64_t row) {
  // w holds the tile's rows only: row + r of the weight is w[r * k, ...].
  using cpu::Vec8;
  Vec8 acc[kRows][kTokens] = {};
  int64_t i = 0;
  for (; i + cpu::kVecWidth <= k; i += cpu::kVecWidth) {
    Vec8 xs[kTokens];
    for (int t = 0; t < kTokens; ++t) xs[t] = cpu::load8(x + t * k + i);
    for (int r = 0; r < kRows; ++r) {
      const Vec8 wv = cpu::load8(w + r * k + i);
      for (int t = 0; t < kTokens; ++t) acc[r][t] += wv * xs[t];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const float* w_row = w + r * k;
    for (int t = 0; t < kTokens; ++t) {
      float sum = cpu::sum8(acc[r][t]);
      for (int64_t j = i; j < k; ++j) sum += x[t * k + j] * w_row[j];
      out[t * n + row + r] = sum + (bias ? bias[row + r] : 0.0f);
    }
  }
}

// Weight rows [row_begin, row_end) (w: row row_begin's weights) for kTokens tokens, as many rows per tile as
// keep <= 8 accumulators.
template <int kTokens>
NANOVLLM_CPU_INLINE void linear_rows(const float* x, const float* w, const float* bias, float* out, int64_t n,
                                     int64_t k, int64_t row_begin, int64_t row_end) {
  constexpr int kRows = kTokens >= 8 ? 1 : 8 / kTokens > 4 ? 4 : 8 / kTokens;
  int64_t row = row_begin;
  for (; row + kRows <= row_end; row += kRows)
    linear_tile<kTokens, kRows>(x, w + (row - row_begin) * k, bias, out, n, k, row);
  for (; row < row_end; ++row) linear_tile<kTokens, 1>(x, w + (row - row_begin) * k, bias, out, n, k, row);
}

}  // namespace

NANOVLLM_CPU_MULTIVERSION
void streaming_linear_rows(const float* x, const float* w, const float* bias, float* out, int64_t tokens, int64_t n,
                           int64_t k, int64_t row_begin, int64_t row_end) {
  switch (tokens) {
    case 1:
      return linear_rows<1>(x, w, bias, out, n, k, row_begin, row_end);
    case 2:
      return linear_rows<2>(x, w, bias, out, n, k, row_begin, row_end);
    case 3:
      return linear_rows<3>(x, w, bias, out, n, k, row_begin, row_end);
    case 4:
      return linear_rows<4>(x, w, bias, out, n, k, row_begin, row_end);
    case 5:
      return linear_rows<5>(x, w, bias, out, n, k, row_begin, row_end);
    case 6:
      return linear_rows<6>(x, w, bias, out, n, k, row_begin, row_end);
    case 7:
      return linear_rows<7>(x, w, bias, out, n, k, row_begin, row_end);
    default:
      return linear_rows<8>(x, w, bias, out, n, k, row_begin, row_end);
  }
}

void sgemm_linear(const float* x, const float* w, const float* bias, float* out, int64_t tokens, int64_t n, int64_t k) {
  float beta = 0.0f;
  if (bias != nullptr) {
    for (int64_t t = 0; t < tokens; ++t) std::memcpy(out + t * n, bias, static_cast<size_t>(n) * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tokens), static_cast<int>(n),
              static_cast<int>(k), 1.0f, x, static_cast<int>(k), w, static_cast<int>(k), beta, out,
              static_cast<int>(n));
}

LinearOperands check_linear_operands(const char* op, const Tensor& x, int64_t n, int64_t k, const Tensor& bias,
                                     const Tensor& out) {
  require_dtype(x, DType::F32, op, "x");
  require_dtype(out, DType::F32, op, "out");
  LinearOperands operands;
  operands.tokens = x.dim(0);
  require_matrix(x, operands.tokens, k, op, "x");
  require_matrix(out, operands.tokens, n, op, "out");
  if (!bias.empty()) {
    require_dtype(bias, DType::F32, op, "bias");
    require_vector(bias, n, op, "bias");
    operands.bias = bias.as<const float>();
  }
  return operands;
}

}  // namespace cpu

void CpuBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) {
  cpu::require_dtype(weight, DType::F32, "linear", "weight");
  const int64_t n = weight.dim(0);
  const int64_t k = weight.row_elems();
  // Plain variables, not a structured binding: OpenMP regions below use them.
  const cpu::LinearOperands operands = cpu::check_linear_operands("linear", x, n, k, bias, out);
  const int64_t tokens = operands.tokens;
  const float* b = operands.bias;
  if (tokens == 0 || n == 0) return;
  const float* xs = x.as<const float>();
  const float* ws = weight.as<const float>();
  float* ys = out.as<float>();

  if (tokens <= cpu::kMaxStreamingTokens) {
    const int64_t chunks = (n + cpu::kRowsPerChunk - 1) / cpu::kRowsPerChunk;
#pragma omp parallel for num_threads(num_threads_) schedule(static) if (n * k > (1 << 16))
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * cpu::kRowsPerChunk;
      cpu::streaming_linear_rows(xs, ws + begin * k, b, ys, tokens, n, k, begin,
                                 std::min(n, begin + cpu::kRowsPerChunk));
    }
    return;
  }
  cpu::sgemm_linear(xs, ws, b, ys, tokens, n, k);
}

}  // namespace nanovllm
