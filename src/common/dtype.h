#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nanovllm {

// F8_E4M3: the OCP 8-bit float with 4 exponent and 3 mantissa bits, no infinities, one NaN code per sign
// (PyTorch's float8_e4m3fn, safetensors' F8_E4M3); for the KV cache and quantised weights.
enum class DType : uint8_t { F32, BF16, F16, I32, I64, F8_E4M3 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F8_E4M3:
      return 1;
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::F8_E4M3:
      return "F8_E4M3";
  }
  return "?";
}

}  // namespace nanovllm
