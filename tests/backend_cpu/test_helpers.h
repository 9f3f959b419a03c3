#pragma once
// Shared pieces of the CPU backend tests: tensors that own their backend memory, random fills (never all
// zeros), NaN poisoning of outputs, and tolerance checks against double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace nanovllm::test {

// A tensor with its own buffer from the backend.
struct OwnedTensor {
  Buffer buffer;
  Tensor tensor;

  float* f32() const { return tensor.as<float>(); }
  int32_t* i32() const { return tensor.as<int32_t>(); }
  int64_t numel() const { return tensor.numel(); }
  std::vector<float> to_vector() const { return std::vector<float>(f32(), f32() + numel()); }
};

inline OwnedTensor make_tensor(Backend& backend, DType dtype, std::initializer_list<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  OwnedTensor t{backend.allocate(static_cast<size_t>(n) * dtype_size(dtype)), {}};
  t.tensor = t.buffer.view(dtype, dims);
  return t;
}

inline OwnedTensor random_f32(Backend& backend, std::initializer_list<int64_t> dims, std::mt19937& rng,
                              float lo = -1.0f, float hi = 1.0f) {
  OwnedTensor t = make_tensor(backend, DType::F32, dims);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
  return t;
}

// An output whose every element is NaN, so an element the op forgets to write fails the comparison.
inline OwnedTensor poisoned_f32(Backend& backend, std::initializer_list<int64_t> dims) {
  OwnedTensor t = make_tensor(backend, DType::F32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::numeric_limits<float>::quiet_NaN();
  return t;
}

inline OwnedTensor i32_tensor(Backend& backend, const std::vector<int32_t>& values) {
  OwnedTensor t = make_tensor(backend, DType::I32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.i32()[i] = values[i];
  return t;
}

inline OwnedTensor f32_tensor(Backend& backend, const std::vector<float>& values) {
  OwnedTensor t = make_tensor(backend, DType::F32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.f32()[i] = values[i];
  return t;
}

// Checks got[i] against want[i] within rel * scale[i] (scale: the size of the terms that make up element i,
// so that elements that cancel to ~0 are judged by the error their inputs allow). Stops after a few reports.
inline void expect_close(const float* got, const std::vector<double>& want, const std::vector<double>& scale,
                         double rel, const char* what) {
  ASSERT_EQ(want.size(), scale.size());
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tolerance = rel * scale[i];
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tolerance)) {  // also catches NaN
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (error " << err << " > "
                    << tolerance << ")";
      if (++reported == 5) return;
    }
  }
}

// The rope table as the model fills it: cos in [:, :d/2], sin in [:, d/2:], inv_freq_i = theta^(-2i/d).
inline OwnedTensor make_rope_table(Backend& backend, int64_t max_pos, int64_t d, double theta) {
  OwnedTensor t = make_tensor(backend, DType::F32, {max_pos, d});
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const float inv_freq = static_cast<float>(std::pow(theta, -2.0 * static_cast<double>(i) / d));
      const float angle = static_cast<float>(p) * inv_freq;
      t.f32()[p * d + i] = std::cos(angle);
      t.f32()[p * d + d / 2 + i] = std::sin(angle);
    }
  }
  return t;
}

}  // namespace nanovllm::test
