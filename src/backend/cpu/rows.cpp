// Row copies: the embedding lookup and gathering the rows that reach the lm_head.
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

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  copy_indexed_rows(table, ids, out, "embedding", num_threads_);
}

void CpuBackend::gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) {
  copy_indexed_rows(x, rows, out, "gather_rows", num_threads_);
}

}  // namespace nanovllm
