#include "backend/cpu/cpu_backend.h"

namespace nanovllm {

void CpuBackend::set_logits(Tensor& logits, const Tensor& rows, const Tensor& tokens, float value) {
  if (logits.dtype != DType::F32 || logits.ndim != 2 || rows.dtype != DType::I32 || tokens.dtype != DType::I32 ||
      rows.numel() != tokens.numel())
    throw EngineError("set_logits: expects F32 logits [R, V] and I32 rows/tokens of one length");
  const int64_t R = logits.dim(0), V = logits.dim(1);
  for (int64_t i = 0; i < rows.numel(); ++i) {
    const int32_t r = rows.as<int32_t>()[i], t = tokens.as<int32_t>()[i];
    if (r < 0 || r >= R || t < 0 || t >= V)
      throw EngineError("set_logits: entry " + std::to_string(i) + " (row " + std::to_string(r) + ", token " +
                        std::to_string(t) + ") is outside the logits");
    logits.as<float>()[r * V + t] = value;
  }
}

}  // namespace nanovllm
