#include "model/dummy_values.h"

#include <cmath>

#include "common/error.h"
#include "common/half_float.h"

namespace nanovllm {
namespace {

// SplitMix64's finaliser: a bijective 64-bit mix, good enough to turn counters into uniform bits.
constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

uint64_t name_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a over the name
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001B3ull;
  }
  return mix64(h ^ mix64(seed + 0x9E3779B97F4A7C15ull));
}

}  // namespace

void fill_dummy_bf16(const ParameterSpec& spec, uint64_t seed, const DummyWeightScales& scales, uint16_t* out) {
  int64_t numel = 1;
  for (int64_t d : spec.shape) numel *= d;
  const int64_t rows = spec.shape.empty() ? 1 : spec.shape[0];
  fill_dummy_bf16_block(spec, seed, scales, 0, rows, 0, rows == 0 ? 0 : numel / rows, out);
}

void fill_dummy_bf16_block(const ParameterSpec& spec, uint64_t seed, const DummyWeightScales& scales, int64_t row_begin,
                           int64_t row_end, int64_t col_begin, int64_t col_end, uint16_t* out) {
  int64_t numel = 1;
  for (int64_t d : spec.shape) numel *= d;
  const int64_t rows = spec.shape.empty() ? 1 : spec.shape[0];
  const int64_t cols = rows == 0 ? 0 : numel / rows;
  if (row_begin < 0 || row_begin > row_end || row_end > rows || col_begin < 0 || col_begin > col_end || col_end > cols)
    throw EngineError("fill_dummy_bf16_block: block outside '" + spec.name + "'");
  // Uniform on (center - half_width, center + half_width); a uniform of std s has half width s * sqrt(3).
  const float sqrt3 = std::sqrt(3.0f);
  float center = 0.0f, half_width = 0.0f;
  switch (spec.kind) {
    case ParameterKind::Matrix:
      half_width = sqrt3 * scales.matrix_gain / std::sqrt(static_cast<float>(spec.fan_in));
      break;
    case ParameterKind::Embedding:
    case ParameterKind::LmHead:
      half_width = sqrt3 * scales.logits_gain / std::sqrt(static_cast<float>(spec.fan_in));
      break;
    case ParameterKind::Norm:
      center = 1.0f;
      half_width = scales.norm_spread;
      break;
    case ParameterKind::Bias:
      half_width = sqrt3 * scales.bias_std;
      break;
  }
  const uint64_t key = name_key(seed, spec.name);
  const int64_t width = col_end - col_begin;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t c = col_begin; c < col_end; ++c) {
      const uint64_t i = static_cast<uint64_t>(r * cols + c);  // element index in the whole parameter
      const uint64_t bits = mix64(key + i * 0x9E3779B97F4A7C15ull);
      const float unit = (static_cast<float>(bits >> 40) + 0.5f) * (2.0f / 16777216.0f) - 1.0f;  // (-1, 1)
      out[(r - row_begin) * width + (c - col_begin)] = float_to_bf16(center + half_width * unit);
    }
  }
}

}  // namespace nanovllm
