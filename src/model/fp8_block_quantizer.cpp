#include "model/fp8_block_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "common/error.h"
#include "common/fp8.h"
#include "common/half_float.h"

namespace nanovllm {

namespace {

// The blocks of a row-major [rows, cols] weight whose element i reads as value(i), in parallel: each block's
// amax, then its codes. Values are read where they lie (no fp32 copy of the weight).
template <class Value>
void quantize_blocks(Fp8Matrix& m, const Value& value) {
  const int64_t block_rows = fp8_blocks(m.rows), block_cols = fp8_blocks(m.cols);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t br = 0; br < block_rows; ++br) {
    for (int64_t bc = 0; bc < block_cols; ++bc) {
      const int64_t r0 = br * kFp8BlockSize, r1 = std::min(m.rows, r0 + kFp8BlockSize);
      const int64_t c0 = bc * kFp8BlockSize, c1 = std::min(m.cols, c0 + kFp8BlockSize);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(value(r * m.cols + c)));
      const float scale = fp8_scale_for_amax(amax);
      m.scales[static_cast<size_t>(br * block_cols + bc)] = scale;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          m.codes[static_cast<size_t>(r * m.cols + c)] = float_to_fp8_e4m3(value(r * m.cols + c) / scale);
    }
  }
}

}  // namespace

Fp8Matrix quantize_fp8_blocks(const HostTensorView& weight) {
  Fp8Matrix m;
  m.rows = weight.shape.empty() ? 1 : weight.shape[0];
  m.cols = m.rows == 0 ? 0 : weight.numel() / m.rows;
  if (weight.dtype != DType::F32 && weight.dtype != DType::BF16 && weight.dtype != DType::F16)
    throw EngineError(std::string("quantize_fp8_blocks: cannot quantise a weight of ") + dtype_name(weight.dtype));
  m.codes.resize(static_cast<size_t>(weight.numel()));
  m.scales.resize(static_cast<size_t>(fp8_blocks(m.rows) * fp8_blocks(m.cols)));
  // The view's bytes need not be aligned for their dtype (a safetensors payload), hence the memcpy loads.
  const auto* bytes = static_cast<const std::byte*>(weight.data);
  const auto load16 = [bytes](int64_t i) {
    uint16_t bits;
    std::memcpy(&bits, bytes + 2 * i, sizeof bits);
    return bits;
  };
  switch (weight.dtype) {
    case DType::F32:
      quantize_blocks(m, [bytes](int64_t i) {
        float v;
        std::memcpy(&v, bytes + 4 * i, sizeof v);
        return v;
      });
      break;
    case DType::BF16:
      quantize_blocks(m, [&load16](int64_t i) { return bf16_to_float(load16(i)); });
      break;
    default:
      quantize_blocks(m, [&load16](int64_t i) { return f16_to_float(load16(i)); });
      break;
  }
  return m;
}

}  // namespace nanovllm
