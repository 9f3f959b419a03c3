#pragma once
// Argument checks shared by the CPU ops. A failed check is the engine's bug (it built a wrong call), so it
// throws EngineError naming the op, the argument and what was expected. They cost nothing next to the ops.
#include <string>

#include "backend/backend.h"
#include "common/error.h"
#include "common/tensor.h"

namespace nanovllm::cpu {

[[noreturn]] inline void fail(const char* op, const std::string& what) {
  throw EngineError(std::string("cpu ") + op + ": " + what);
}

inline void require(bool ok, const char* op, const std::string& what) {
  if (!ok) fail(op, what);
}

inline void require_dtype(const Tensor& t, DType dtype, const char* op, const char* name) {
  if (t.empty()) fail(op, std::string(name) + " is empty");
  if (t.dtype != dtype) fail(op, std::string(name) + " is " + dtype_name(t.dtype) + ", expected " + dtype_name(dtype));
}

// t holds `rows` rows of `cols` elements (any split of the trailing dimensions).
inline void require_matrix(const Tensor& t, int64_t rows, int64_t cols, const char* op, const char* name) {
  const bool ok = t.ndim >= 1 && t.dim(0) == rows && t.numel() == rows * cols;
  if (!ok)
    fail(op, std::string(name) + " has shape " + t.shape_string() + ", expected [" + std::to_string(rows) + ", " +
                 std::to_string(cols) + "]");
}

inline void require_vector(const Tensor& t, int64_t n, const char* op, const char* name) {
  if (t.numel() != n)
    fail(op, std::string(name) + " has shape " + t.shape_string() + ", expected " + std::to_string(n) + " elements");
}

// K and V of one layer: both F32 or both FP8 (then with positive, finite scales).
inline void require_kv_cache(const KvCacheLayer& cache, const char* op) {
  const DType dtype = cache.is_fp8() ? DType::F8_E4M3 : DType::F32;
  require_dtype(cache.k, dtype, op, "cache.k");
  require_dtype(cache.v, dtype, op, "cache.v");
  const std::string scale_problem = cache.scale_problem();
  require(scale_problem.empty(), op, scale_problem);
}

}  // namespace nanovllm::cpu
