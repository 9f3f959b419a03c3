#pragma once
// Host-side conversions between fp32 and FP8 E4M3 (see DType::F8_E4M3): bias 7, largest finite value 448,
// subnormals down to 2^-9. The encoder rounds to nearest, ties to even, and saturates to +-448 (infinities
// too), as the GPU's cvt with .satfinite does, so that the CPU reference and the CUDA kernels write the same
// codes for the same fp32 value; NaN becomes the NaN code.
#include <array>
#include <cmath>
#include <cstdint>

namespace nanovllm {

constexpr float kFp8E4m3Max = 448.0f;
// Block-scaled FP8 weights (Qwen's and DeepSeek's checkpoints): one scale per kFp8BlockSize x kFp8BlockSize
// block of a linear's [N, K] weight.
constexpr int64_t kFp8BlockSize = 128;
// The scale blocks along a dimension of `size` elements: ceil(size / kFp8BlockSize).
constexpr int64_t fp8_blocks(int64_t size) { return (size + kFp8BlockSize - 1) / kFp8BlockSize; }

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
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kFp8E4m3Max) return sign | 0x7e;  // 448 and beyond (nothing rounds past 448 but saturates to it)
  if (a < 0x1p-6f) {
    // Subnormal range, steps of 2^-9; a result of 8 steps is the smallest normal (code 0x08) and needs no
    // special case. Scaling by a power of two is exact, so nearbyint's ties-to-even is the format's.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));
  }
  int exponent = 0;
  const float fraction = std::frexp(a, &exponent);                 // a = fraction * 2^exponent, fraction in [0.5, 1)
  int steps = static_cast<int>(std::nearbyint(fraction * 16.0f));  // 1.mmm * 8, in [8, 16]
  int biased = exponent - 1 + 7;
  if (steps == 16) {  // rounded up into the next binade
    steps = 8;
    ++biased;
  }
  return sign | static_cast<uint8_t>(biased << 3) | static_cast<uint8_t>(steps - 8);
}

}  // namespace nanovllm
