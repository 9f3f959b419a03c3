// Row copies: the embedding lookup, gathering the rows that reach the lm_head, joining logits chunks.
#include <algorithm>
#include <cstring>

#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"

namespace nanovllm {

namespace {

// out[r] = src[index[r]] for rows of `cols` floats; every index is checked against src's row count.
void copy_indexed_rows(const Tensor& src, const Tensor& index, Tensor& out, const char* op, int num_threads) {
  cpu::require_dtype(src, DType::F32, op, "source");
  cpu::require_dtype(index, DType::I32, op, "index");
  cpu::require_dtype(out, DType::F32, op, "out");
  const int64_t num_rows = index.numel();
  const int64_t src_rows = src.dim(0);
  const int64_t cols = src.row_elems();
  cpu::require_matrix(out, num_rows, cols, op, "out");
  const int32_t* idx = index.as<const int32_t>();
  for (int64_t r = 0; r < num_rows; ++r)
    cpu::require(idx[r] >= 0 && idx[r] < src_rows, op,
                 "index " + std::to_string(idx[r]) + " at row " + std::to_string(r) + " is outside [0, " +
                     std::to_string(src_rows) + ")");
  const float* in = src.as<const float>();
  float* dst = out.as<float>();
#pragma omp parallel for num_threads(num_threads) schedule(static) if (num_rows * cols > (1 << 15))
  for (int64_t r = 0; r < num_rows; ++r)
    std::memcpy(dst + r * cols, in + static_cast<int64_t>(idx[r]) * cols, static_cast<size_t>(cols) * sizeof(float));
}

}  // namespace

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  cpu::require_dtype(table, DType::F32, "embedding", "table");
  cpu::require_dtype(ids, DType::I32, "embedding", "ids");
  cpu::require_dtype(out, DType::F32, "embedding", "out");
  const int64_t num_rows = ids.numel(), table_rows = table.dim(0), cols = table.row_elems();
  cpu::require_matrix(out, num_rows, cols, "embedding", "out");
  const int32_t* id = ids.as<const int32_t>();
  const float* in = table.as<const float>();
  float* dst = out.as<float>();
#pragma omp parallel for num_threads(num_threads_) schedule(static) if (num_rows * cols > (1 << 15))
  for (int64_t r = 0; r < num_rows; ++r) {
    const int64_t row = id[r] - vocab_start;
    if (row >= 0 && row < table_rows)
      std::memcpy(dst + r * cols, in + row * cols, static_cast<size_t>(cols) * sizeof(float));
    else
      std::memset(dst + r * cols, 0, static_cast<size_t>(cols) * sizeof(float));  // another rank's row
  }
}

void CpuBackend::gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) {
  copy_indexed_rows(x, rows, out, "gather_rows", num_threads_);
}

void CpuBackend::concat_column_chunks(const Tensor& parts, Tensor& out) {
  cpu::require_dtype(parts, DType::F32, "concat_column_chunks", "parts");
  cpu::require_dtype(out, DType::F32, "concat_column_chunks", "out");
  cpu::require(parts.ndim == 3 && out.ndim == 2 && parts.dim(1) == out.dim(0) &&
                   out.dim(1) <= parts.dim(0) * parts.dim(2),
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
