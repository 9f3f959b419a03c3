#pragma once
// One tensor-parallel rank's block of an FP8 linear weight on the host, and the rule that keeps its scale
// blocks whole: a block of the [N, K] weight must start on a multiple of 128 in both dimensions and end on one
// or at the weight's edge, so that every 128 x 128 scale block belongs to exactly one rank.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/fp8_block_quantizer.h"
#include "model/safetensors.h"

namespace nanovllm {

// A parameter's host bytes, aligned to the element size. `owned` is set when the data was generated or
// copied (the view points into it); for mapped data it is empty and the view lives as long as the
// WeightSource.
struct HostTensor {
  HostTensorView view;
  std::shared_ptr<void> owned;
};

// Half-open index range [begin, end).
struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

struct Fp8HostBlock {
  HostTensor weight;  // F8_E4M3 [rows, cols]
  HostTensor scale;   // F32 [ceil(rows / 128), ceil(cols / 128)]
};

// The scale blocks that the weight block rows x cols of `name` (shape [N, K]) covers; throws InvalidInput
// naming the tensor, its shape and the block when the block cuts a scale block.
struct Fp8ScaleRanges {
  IndexRange rows, cols;
};
Fp8ScaleRanges fp8_scale_ranges(const std::string& name, const std::vector<int64_t>& shape, IndexRange rows,
                                IndexRange cols);

// The codes and scales of `matrix` as host tensors that own them.
Fp8HostBlock to_host_block(Fp8Matrix matrix);

}  // namespace nanovllm
