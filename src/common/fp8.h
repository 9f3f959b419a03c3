#pragma once
// Host-side conversions between fp32 and FP8 E4M3 (see DType::F8_E4M3): bias 7, largest finite value 448,
// subnormals down to 2^-9. The encoder rounds to nearest, ties to even, and saturates to +-448 (infinities
// too), as the GPU's cvt with .satfinite does, so that the CPU reference and the CUDA kernels write the same
// codes for the same fp32 value; NaN becomes the NaN code.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace nanovllm {

constexpr float kFp8E4m3Max = 448.0f;
// Block-scaled FP8 weights (Qwen's and DeepSeek's checkpoints): one scale per kFp8BlockSize x kFp8BlockSize
// block of a linear's [N, K] weight.
constexpr int64_t kFp8BlockSize = 128;
// The scale blocks along a dimension of `size` elements: ceil(size / kFp8BlockSize).
constexpr int64_t fp8_blocks(int64_t size) { return (size + kFp8BlockSize - 1) / kFp8BlockSize; }

// The scale of a block of values (a weight's 128 x 128 block, an activation's 128-wide group) from its largest
// magnitude: amax / 448, so that the largest becomes the code 448; 1 for a block of zeros (its codes are 0 whatever
// the scale). IEEE division on host and device (nvcc divides by IEEE rules unless fast math is on, which this
// project never sets), so the CPU references and the CUDA kernels agree bit for bit.
NANOVLLM_HOST_DEVICE float fp8_scale_for_amax(float amax) { return amax > 0.0f ? amax / kFp8E4m3Max : 1.0f; }

inline float fp8_e4m3_to_float(uint8_t code) {
  const float sign = (code & 0x80u) != 0 ? -1.0f : 1.0f;
  const int exponent = (code >> 3) & 0xf;
  const int mantissa = code & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m * 2^-9
  return sign * std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);      // 1.m * 2^(e - 7)
}

// Every code's value, decoded once (for loops that decode many codes).
inline const std::array<float, 256>& fp8_e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> values{};
    for (size_t code = 0; code < values.size(); ++code) values[code] = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    return values;
  }();
  return table;
}

inline uint8_t float_to_fp8_e4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x43e00000u) return sign | 0x7e;  // 448 and beyond (infinity too) saturate to 448
  if (magnitude < 0x3c800000u) {
    // Below 2^-6: subnormal steps of 2^-9; a result of 8 steps is the smallest normal (code 0x08) and needs no
    // special case. Scaling by a power of two is exact, so nearbyint's ties-to-even is the format's.
    return sign | static_cast<uint8_t>(std::nearbyint(std::bit_cast<float>(magnitude) * 0x1p9f));
  }
  // Normal: the fp32 exponent and the top 3 mantissa bits, the 20 dropped bits rounded to nearest, ties to even
  // (a carry out of the mantissa steps into the next binade, which is the next code), the exponent rebiased
  // from 127 to 7. Integer work only: the loaders quantise billions of weights with it.
  const uint32_t rounded = magnitude + 0x7ffffu + ((magnitude >> 20) & 1u);
  return sign | static_cast<uint8_t>((rounded >> 20) - ((127u - 7u) << 3));
}

}  // namespace nanovllm
