// Row copies: the embedding lookup, gathering the rows that reach the lm_head, joining logits chunks.
#include <algorithm>
#include <cstring>

#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"

namespace nanovllm {

namespace {

// What an index outside src's rows means: an error (gather_rows), or a zero row (embedding: a token another
// vocabulary-parallel rank holds).
enum class Outside { kRefuse, kZeroRow };

// out[r] = src[index[r] - first] for rows of `cols` floats. names: what the op calls src and index.
void copy_indexed_rows(const Tensor& src, const Tensor& index, int64_t first, Outside outside, Tensor& out,
                       const char* op, const char* src_name, const char* index_name, int num_threads) {
  cpu::require_dtype(src, DType::F32, op, src_name);
  cpu::require_dtype(index, DType::I32, op, index_name);
  cpu::require_dtype(out, DType::F32, op, "out");
  const int64_t num_rows = index.numel();
  const int64_t src_rows = src.dim(0);
  const int64_t cols = src.row_elems();
  cpu::require_matrix(out, num_rows, cols, op, "out");
  const int32_t* idx = index.as<const int32_t>();
  if (outside == Outside::kRefuse) {
    for (int64_t r = 0; r < num_rows; ++r)
      cpu::require(idx[r] - first >= 0 && idx[r] - first < src_rows, op,
                   std::string(index_name) + " " + std::to_string(idx[r]) + " at row " + std::to_string(r) +
                       " is outside [" + std::to_string(first) + ", " + std::to_string(first + src_rows) + ")");
  }
  const float* in = src.as<const float>();
  float* dst = out.as<float>();
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(float);
#pragma omp parallel for num_threads(num_threads) schedule(static) if (num_rows * cols > (1 << 15))
  for (int64_t r = 0; r < num_rows; ++r) {
    const int64_t row = idx[r] - first;
    if (row >= 0 && row < src_rows) std::memcpy(dst + r * cols, in + row * cols, row_bytes);
    else std::memset(dst + r * cols, 0, row_bytes);  // Outside::kZeroRow (kRefuse has thrown above)
  }
}

}  // namespace

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  copy_indexed_rows(table, ids, vocab_start, Outside::kZeroRow, out, "embedding", "table", "ids", num_threads_);
}

void CpuBackend::gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) {
  copy_indexed_rows(x, rows, 0, Outside::kRefuse, out, "gather_rows", "source", "index", num_threads_);
}

void CpuBackend::concat_column_chunks(const Tensor& parts, Tensor& out) {
  cpu::require_dtype(parts, DType::F32, "concat_column_chunks", "parts");
  cpu::require_dtype(out, DType::F32, "concat_column_chunks", "out");
  cpu::require(
      parts.ndim == 3 && out.ndim == 2 && parts.dim(1) == out.dim(0) && out.dim(1) <= parts.dim(0) * parts.dim(2),
      "concat_column_chunks", "parts " + parts.shape_string() + " do not fill out " + out.shape_string());
  const int64_t P = parts.dim(0), R = parts.dim(1), C = parts.dim(2), N = out.dim(1);
  const float* in = parts.as<const float>();
  float* dst = out.as<float>();
  for (int64_t p = 0; p < P && p * C < N; ++p) {
    const int64_t width = std::min(C, N - p * C);
    for (int64_t r = 0; r < R; ++r)
      std::memcpy(dst + r * N + p * C, in + (p * R + r) * C, static_cast<size_t>(width) * sizeof(float));
  }
}

}  // namespace nanovllm
