#pragma once
// Eight FP8 E4M3 values in 8 bytes: the FP8 KV cache's unit, as Bf16x8 is bf16's. Encoding rounds to nearest
// even and saturates at +-448 (cvt .satfinite), the rule common/fp8.h implements on the host; decoding is exact
// (every E4M3 value is a half and a bf16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace nanovllm::cuda {

// Two floats as codes in the low 16 bits, `low` in the low byte.
__device__ __forceinline__ uint32_t fp8x2_from_floats(float low, float high) {
  return __nv_cvt_float2_to_fp8x2(make_float2(low, high), __NV_SATFINITE, __NV_E4M3);
}

// Four floats as the four codes of one word, first in the low byte.
__device__ __forceinline__ uint32_t fp8x4_from_floats(float f0, float f1, float f2, float f3) {
  return fp8x2_from_floats(f0, f1) | fp8x2_from_floats(f2, f3) << 16;
}

__device__ __forceinline__ uint2 fp8x8_from_float(const float (&f)[8]) {
  return make_uint2(fp8x4_from_floats(f[0], f[1], f[2], f[3]), fp8x4_from_floats(f[4], f[5], f[6], f[7]));
}

// Two codes (the low 16 bits of `pair`, first value in the low byte) as a half pair: one instruction.
__device__ __forceinline__ __half2 fp8x2_to_half2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3);
  return *reinterpret_cast<const __half2*>(&h);
}

// The same two codes as floats.
__device__ __forceinline__ float2 fp8x2_to_float2(uint32_t pair) { return __half22float2(fp8x2_to_half2(pair)); }

// Four codes (first value in the low byte) as two half pairs, in order.
__device__ __forceinline__ void fp8x4_to_half2(uint32_t word, __half2& lo, __half2& hi) {
  lo = fp8x2_to_half2(word);
  hi = fp8x2_to_half2(word >> 16);
}

__device__ __forceinline__ void fp8x8_to_float(const uint2& v, float (&f)[8]) {
  const uint32_t w[2] = {v.x, v.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 a = fp8x2_to_float2(w[i]);
    const float2 b = fp8x2_to_float2(w[i] >> 16);
    f[4 * i] = a.x;
    f[4 * i + 1] = a.y;
    f[4 * i + 2] = b.x;
    f[4 * i + 3] = b.y;
  }
}

// Eight codes as the four bf16 pairs (a 16-byte bf16 vector) of the same values: exact, E4M3 fits bf16.
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(const uint2& codes) {
  float f[8];
  fp8x8_to_float(codes, f);
  uint4 v;
  uint32_t* w = &v.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    w[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  return v;
}

// Eight codes as bf16 values 2^-120 times theirs, on the integer pipes (three instructions a pair, where
// fp8x8_to_bf16x8 takes four conversions): each code's sign goes to bit 15 and its 7 exponent and mantissa bits
// just below bf16's 8-bit exponent field, so E4M3's exponent bias 7 reads as bf16's 127: the value times 2^-120,
// exactly, subnormals included (both formats scale their subnormal mantissas alike). The caller multiplies the
// sums by kScaledBf16Factor.
inline constexpr float kScaledBf16Factor = 0x1p120f;
__device__ __forceinline__ uint4 fp8x8_to_scaled_bf16x8(const uint2& codes) {
  const auto pair = [](uint32_t word, uint32_t selector) {
    const uint32_t t = __byte_perm(word, 0, selector);  // two codes in bytes 1 and 3, zeros in bytes 0 and 2
    return (t & 0x80008000u) | ((t & 0x7f007f00u) >> 4);
  };
  return make_uint4(pair(codes.x, 0x1404), pair(codes.x, 0x3424), pair(codes.y, 0x1404), pair(codes.y, 0x3424));
}

}  // namespace nanovllm::cuda
