#pragma once
// Block-scaled FP8 quantisation of a linear's weight, the rule Qwen's and DeepSeek's FP8 checkpoints are made
// by: per 128 x 128 block, scale = amax(|block|) / 448 (1 for a block of zeros) and code =
// float_to_fp8_e4m3(w / scale); the stored weight_scale_inv is that scale (it multiplies the codes back).
// One function, used both where weights are quantised as they load and where FP8 checkpoints are written.
#include <cstdint>
#include <vector>

#include "common/fp8.h"  // kFp8BlockSize, fp8_blocks
#include "model/safetensors.h"

namespace nanovllm {

struct Fp8Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;  // F8_E4M3 [rows, cols]
  std::vector<float> scales;   // [ceil(rows / 128), ceil(cols / 128)]
};

// Quantises a row-major [rows, cols] weight of F32, BF16 or F16 (a 1-D view is one column); blocks start at
// element (0, 0). Throws EngineError for another dtype.
Fp8Matrix quantize_fp8_blocks(const HostTensorView& weight);

}  // namespace nanovllm
