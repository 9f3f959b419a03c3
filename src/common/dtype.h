#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nanovllm {

enum class DType : uint8_t { F32, BF16, F16, I32, I64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
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
  }
  return "?";
}

}  // namespace nanovllm
