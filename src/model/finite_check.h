#pragma once
// A look for NaN and Inf in checkpoint tensors as they load. A NaN weight turns every logit into NaN, and
// sampling from those yields token 0 forever with no hint why; a clear error at load is far better.
#include <string>

#include "model/safetensors.h"

namespace nanovllm {

// The elements checked per tensor: all of a small one (norms, biases), an evenly spaced sample of a large
// one. A full pass would read every weight once more than loading does (seconds on large checkpoints);
// the sample costs nothing and still catches what makes weights non-finite in practice: corrupt or
// mis-typed files, overflowed conversions, a tensor of NaN.
inline constexpr int64_t kFiniteCheckSamples = 1 << 14;

// Throws InvalidInput "<where>tensor 'name' holds a non-finite value (nan) at element i" on the first
// NaN or Inf among the sampled elements.
void check_finite_sample(const HostTensorView& view, const std::string& where, const std::string& name);

}  // namespace nanovllm
