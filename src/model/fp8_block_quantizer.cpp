#include "model/fp8_block_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/fp8.h"
#include "common/half_float.h"

namespace nanovllm {
namespace {

// The weight as fp32, whatever float type it is stored in (the data may be unaligned: read with memcpy).
std::vector<float> as_floats(const HostTensorView& view) {
  const auto n = static_cast<size_t>(view.numel());
  std::vector<float> out(n);
  const auto* bytes = static_cast<const std::byte*>(view.data);
  switch (view.dtype) {
    case DType::F32:
      std::memcpy(out.data(), bytes, n * sizeof(float));
      break;
    case DType::BF16:
    case DType::F16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, sizeof bits);
        out[i] = view.dtype == DType::BF16 ? bf16_to_float(bits) : f16_to_float(bits);
      }
      break;
    default:
      throw EngineError(std::string("quantize_fp8_blocks: cannot quantise a weight of ") + dtype_name(view.dtype));
  }
  return out;
}

}  // namespace

int64_t fp8_blocks(int64_t size) { return (size + kFp8BlockSize - 1) / kFp8BlockSize; }

Fp8Matrix quantize_fp8_blocks(const HostTensorView& weight) {
  Fp8Matrix m;
  m.rows = weight.shape.empty() ? 1 : weight.shape[0];
  m.cols = m.rows == 0 ? 0 : weight.numel() / m.rows;
  const std::vector<float> w = as_floats(weight);
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
