#include "model/finite_check.h"

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm {
namespace {

// The exponent bits all set: Inf or NaN (bf16 and f16 share this shape with their own masks).
bool finite_element(const std::byte* p, DType dtype) {
  switch (dtype) {
    case DType::F32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return std::isfinite(v);
    }
    case DType::BF16: {
      uint16_t bits;
      std::memcpy(&bits, p, sizeof bits);
      return (bits & 0x7F80u) != 0x7F80u;
    }
    case DType::F16: {
      uint16_t bits;
      std::memcpy(&bits, p, sizeof bits);
      return (bits & 0x7C00u) != 0x7C00u;
    }
    case DType::F8_E4M3:  // no infinities; S.1111.111 is NaN
      return (std::to_integer<unsigned>(*p) & 0x7Fu) != 0x7Fu;
    default:
      return true;
  }
}

}  // namespace

void check_finite_sample(const HostTensorView& view, const std::string& where, const std::string& name) {
  const int64_t numel = view.numel();
  const int64_t stride = numel <= kFiniteCheckSamples ? 1 : numel / kFiniteCheckSamples;
  const size_t elem = dtype_size(view.dtype);
  const auto* base = static_cast<const std::byte*>(view.data);
  for (int64_t i = 0; i < numel; i += stride)
    if (!finite_element(base + static_cast<size_t>(i) * elem, view.dtype))
      throw InvalidInput(where + "tensor " + quoted_text(name) + " holds a non-finite value (NaN or Inf) at element " +
                         std::to_string(i) + "; the checkpoint is corrupt");
}

}  // namespace nanovllm
