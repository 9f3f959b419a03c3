// SwiGLU's elementwise half: out = silu(gate) * up, with gate_up [T, 2I] holding gate then up per row.
#include <cmath>

#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"

namespace nanovllm {

void CpuBackend::silu_and_mul(const Tensor& gate_up, Tensor& out) {
  const char* op = "silu_and_mul";
  cpu::require_dtype(gate_up, DType::F32, op, "gate_up");
  cpu::require_dtype(out, DType::F32, op, "out");
  const int64_t tokens = gate_up.dim(0);
  const int64_t width = gate_up.row_elems();
  cpu::require(width % 2 == 0, op, "gate_up " + gate_up.shape_string() + " has an odd row width");
  const int64_t inter = width / 2;
  cpu::require_matrix(out, tokens, inter, op, "out");
  const float* in = gate_up.as<const float>();
  float* y = out.as<float>();
#pragma omp parallel for num_threads(num_threads_) schedule(static) if (tokens * inter > (1 << 15))
  for (int64_t t = 0; t < tokens; ++t) {
    const float* gate = in + t * width;
    const float* up = gate + inter;
    float* dst = y + t * inter;
    // silu(g) = g * sigmoid(g) = g / (1 + exp(-g)); a large negative g gives g / inf = -0, not NaN.
    for (int64_t i = 0; i < inter; ++i) dst[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

}  // namespace nanovllm
