#include "model/fp8_block_quantizer.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/fp8.h"

namespace nanovllm {

Fp8Matrix quantize_fp8_blocks(const HostTensorView& weight) {
  Fp8Matrix m;
  m.rows = weight.shape.empty() ? 1 : weight.shape[0];
  m.cols = m.rows == 0 ? 0 : weight.numel() / m.rows;
  if (weight.dtype != DType::F32 && weight.dtype != DType::BF16 && weight.dtype != DType::F16)
    throw EngineError(std::string("quantize_fp8_blocks: cannot quantise a weight of ") + dtype_name(weight.dtype));
  const std::vector<float> w = floats_of(weight);
  const int64_t block_rows = fp8_blocks(m.rows), block_cols = fp8_blocks(m.cols);
  m.codes.resize(w.size());
  m.scales.resize(static_cast<size_t>(block_rows * block_cols));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t br = 0; br < block_rows; ++br) {
    for (int64_t bc = 0; bc < block_cols; ++bc) {
      const int64_t r0 = br * kFp8BlockSize, r1 = std::min(m.rows, r0 + kFp8BlockSize);
      const int64_t c0 = bc * kFp8BlockSize, c1 = std::min(m.cols, c0 + kFp8BlockSize);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * m.cols + c]));
      const float scale = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
      m.scales[br * block_cols + bc] = scale;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) m.codes[r * m.cols + c] = float_to_fp8_e4m3(w[r * m.cols + c] / scale);
    }
  }
  return m;
}

}  // namespace nanovllm
