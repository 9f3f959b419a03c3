// linear over a block-scaled FP8 weight, the reference math: every weight element is dequantised to fp32 (its
// code's value times its block's scale, one fp32 multiply) and then summed by linear's own kernels. The
// streaming path dequantises one chunk of rows at a time into a per-thread buffer (the weights stay 1 byte an
// element in memory); the sgemm path dequantises the whole weight first, since sgemm wants it whole.
#include <algorithm>
#include <array>
#include <vector>

#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/linear_kernels.h"
#include "common/fp8.h"

namespace nanovllm {

namespace {

// Rows [row_begin, row_end) of the weight [n, k] as fp32, into out [row_end - row_begin, k].
void dequantize_rows(const uint8_t* codes, const float* scales, int64_t k, int64_t row_begin, int64_t row_end,
                     float* out) {
  const std::array<float, 256>& values = fp8_e4m3_values();
  const int64_t scale_cols = fp8_blocks(k);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const uint8_t* code_row = codes + row * k;
    const float* scale_row = scales + (row / kFp8BlockSize) * scale_cols;
    float* out_row = out + (row - row_begin) * k;
    for (int64_t col = 0; col < k; ++col) out_row[col] = values[code_row[col]] * scale_row[col / kFp8BlockSize];
  }
}

}  // namespace

void CpuBackend::linear_fp8(const Tensor& x, const Tensor& weight, const Tensor& block_scale, const Tensor& bias,
                            Tensor& out) {
  const char* op = "linear_fp8";
  cpu::require_dtype(weight, DType::F8_E4M3, op, "weight");
  cpu::require_dtype(block_scale, DType::F32, op, "block_scale");
  const int64_t n = weight.dim(0);
  const int64_t k = weight.row_elems();
  // Plain variables, not a structured binding: OpenMP regions below use them.
  const cpu::LinearOperands operands = cpu::check_linear_operands(op, x, n, k, bias, out);
  const int64_t tokens = operands.tokens;
  const float* b = operands.bias;
  cpu::require_matrix(block_scale, fp8_blocks(n), fp8_blocks(k), op, "block_scale");
  if (tokens == 0 || n == 0) return;
  const float* xs = x.as<const float>();
  const auto* codes = weight.as<const uint8_t>();
  const float* scales = block_scale.as<const float>();
  float* ys = out.as<float>();

  if (tokens <= cpu::kMaxStreamingTokens) {
    const int64_t chunks = (n + cpu::kRowsPerChunk - 1) / cpu::kRowsPerChunk;
#pragma omp parallel num_threads(num_threads_) if (n * k > (1 << 16))
    {
      std::vector<float> rows(static_cast<size_t>(cpu::kRowsPerChunk * k));
#pragma omp for schedule(static)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t begin = c * cpu::kRowsPerChunk, end = std::min(n, begin + cpu::kRowsPerChunk);
        dequantize_rows(codes, scales, k, begin, end, rows.data());
        cpu::streaming_linear_rows(xs, rows.data(), b, ys, tokens, n, k, begin, end);
      }
    }
    return;
  }
  std::vector<float> dequantized(static_cast<size_t>(n * k));
  const int64_t chunks = (n + cpu::kRowsPerChunk - 1) / cpu::kRowsPerChunk;
#pragma omp parallel for num_threads(num_threads_) schedule(static) if (n * k > (1 << 16))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * cpu::kRowsPerChunk, end = std::min(n, begin + cpu::kRowsPerChunk);
    dequantize_rows(codes, scales, k, begin, end, dequantized.data() + begin * k);
  }
  cpu::sgemm_linear(xs, dequantized.data(), b, ys, tokens, n, k);
}

}  // namespace nanovllm
