#pragma once
// Bit-exact comparison of float arrays: a copy must keep every bit (-0.0f, NaN payloads), which == cannot see.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace nanovllm::testing {

// The bit patterns of `count` floats at `data`, to compare with EXPECT_EQ.
inline std::vector<uint32_t> float_bits(const void* data, size_t count) {
  const float* values = static_cast<const float*>(data);
  std::vector<uint32_t> bits(count);
  for (size_t i = 0; i < count; ++i) bits[i] = std::bit_cast<uint32_t>(values[i]);
  return bits;
}

}  // namespace nanovllm::testing
