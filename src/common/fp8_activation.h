#pragma once
// Dynamic FP8 quantisation of activations, the "dynamic" activation scheme of Qwen's FP8 checkpoints: each token's
// row is cut into groups of kFp8BlockSize along K (the last group may be shorter) and each group gets
//
//   scale = amax(|group|) / 448      (1 for a group of zeros: its codes are 0 whatever the scale)
//   code  = float_to_fp8_e4m3(x / scale)   (round to nearest even, saturating at +-448)
//
// so that code * scale is x within E4M3's rounding. The scale rule (fp8_scale_for_amax) and the rounding are
// common/fp8.h's, shared with the CUDA kernel (fp8_act_quant.cu) and the weights' block quantiser; the GPU's cvt
// .satfinite rounds as float_to_fp8_e4m3 does.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/fp8.h"

namespace nanovllm {

// The reference: x [rows, cols] (fp32 holding the activations' values) to codes [rows, cols] and scales
// [rows, fp8_blocks(cols)], row-major (the CUDA kernel writes its scales in cuBLASLt's order instead).
inline void quantize_fp8_activations(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales) {
  const int64_t groups = fp8_blocks(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * kFp8BlockSize, end = std::min(cols, begin + kFp8BlockSize);
      float amax = 0.0f;
      for (int64_t c = begin; c < end; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      const float scale = fp8_scale_for_amax(amax);
      scales[r * groups + g] = scale;
      for (int64_t c = begin; c < end; ++c) codes[r * cols + c] = float_to_fp8_e4m3(x[r * cols + c] / scale);
    }
  }
}

}  // namespace nanovllm
