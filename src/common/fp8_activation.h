#pragma once
// Dynamic FP8 quantisation of activations, the "dynamic" activation scheme of Qwen's FP8 checkpoints: each token's
// row is cut into groups of kFp8BlockSize along K (the last group may be shorter) and each group gets
//
//   scale = amax(|group|) / 448      (1 for a group of zeros: its codes are 0 whatever the scale)
//   code  = float_to_fp8_e4m3(x / scale)   (round to nearest even, saturating at +-448)
//
// so that code * scale is x within E4M3's rounding. The scale rule is shared with the CUDA kernel
// (fp8_act_quant.cu); the rounding is common/fp8.h's, which the GPU's cvt .satfinite matches.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/fp8.h"
#include "common/host_device.h"

namespace nanovllm {

// The group's scale from its largest magnitude. IEEE division on both sides (nvcc divides by IEEE rules unless
// fast math is on, which this project never sets).
NANOVLLM_HOST_DEVICE float fp8_group_scale(float amax) { return amax > 0.0f ? amax / kFp8E4m3Max : 1.0f; }

// The reference: x [rows, cols] (fp32 holding the activations' values) to codes [rows, cols] and scales
// [rows, fp8_blocks(cols)], row-major (the CUDA kernel writes its scales in cuBLASLt's order instead).
inline void quantize_fp8_activations(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales) {
  const int64_t groups = fp8_blocks(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * kFp8BlockSize, end = std::min(cols, begin + kFp8BlockSize);
      float amax = 0.0f;
      for (int64_t c = begin; c < end; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      const float scale = fp8_group_scale(amax);
      scales[r * groups + g] = scale;
      for (int64_t c = begin; c < end; ++c) codes[r * cols + c] = float_to_fp8_e4m3(x[r * cols + c] / scale);
    }
  }
}

}  // namespace nanovllm
