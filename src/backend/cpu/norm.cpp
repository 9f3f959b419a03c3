// RMSNorm over the hidden size, alone and fused with the residual add that precedes it in every layer.
#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/rms_row.h"

namespace nanovllm {

namespace {

void check_norm_args(const Tensor& x, const Tensor& weight, const Tensor& out, const char* op) {
  cpu::require_dtype(x, DType::F32, op, "x");
  cpu::require_dtype(weight, DType::F32, op, "weight");
  cpu::require_dtype(out, DType::F32, op, "out");
  const int64_t hidden = weight.numel();
  cpu::require(hidden > 0, op, "weight has no elements");
  cpu::require_matrix(x, x.dim(0), hidden, op, "x");
  cpu::require_matrix(out, x.dim(0), hidden, op, "out");
}

}  // namespace

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  check_norm_args(x, weight, out, "rms_norm");
  const int64_t rows = x.dim(0), hidden = weight.numel();
  const float* in = x.as<const float>();
  const float* w = weight.as<const float>();
  float* y = out.as<float>();
#pragma omp parallel for num_threads(num_threads_) schedule(static) if (rows * hidden > (1 << 15))
  for (int64_t t = 0; t < rows; ++t) cpu::rms_norm_row(in + t * hidden, w, hidden, eps, y + t * hidden);
}

void CpuBackend::add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out) {
  check_norm_args(x, weight, out, "add_rms_norm");
  const int64_t rows = x.dim(0), hidden = weight.numel();
  cpu::require_dtype(residual, DType::F32, "add_rms_norm", "residual");
  cpu::require_matrix(residual, rows, hidden, "add_rms_norm", "residual");
  const float* in = x.as<const float>();
  const float* w = weight.as<const float>();
  float* res = residual.as<float>();
  float* y = out.as<float>();
  // Row by row, the add finishes before the norm writes, so out may alias x.
#pragma omp parallel for num_threads(num_threads_) schedule(static) if (rows * hidden > (1 << 15))
  for (int64_t t = 0; t < rows; ++t) {
    float* r = res + t * hidden;
    const float* xt = in + t * hidden;
    for (int64_t i = 0; i < hidden; ++i) r[i] += xt[i];
    cpu::rms_norm_row(r, w, hidden, eps, y + t * hidden);
  }
}

}  // namespace nanovllm
