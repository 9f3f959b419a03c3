#pragma once
// Quantisation at load (vLLM's --quantization fp8): a WeightSource over another whose linear weights are BF16,
// F16 or F32 (a checkpoint or dummy weights), handing them to the model in block-scaled FP8 as an FP8
// checkpoint written from the same weights would hold them (quantize_fp8_blocks). Everything else passes through.
#include <memory>
#include <string>
#include <vector>

#include "model/weight_source.h"

namespace nanovllm {

class Fp8QuantizingWeights : public WeightSource {
 public:
  explicit Fp8QuantizingWeights(std::unique_ptr<WeightSource> source) : source_(std::move(source)) {}

  HostTensor get(const std::string& name, const std::vector<int64_t>& expected_shape) override {
    return source_->get(name, expected_shape);
  }
  bool contains(const std::string& name) const override { return source_->contains(name); }
  HostTensor get_as_stored(const std::string& name) override { return source_->get_as_stored(name); }
  HostTensor get_block(const std::string& name, const std::vector<int64_t>& expected_shape, IndexRange rows,
                       IndexRange cols) override {
    return source_->get_block(name, expected_shape, rows, cols);
  }
  // Quantises the block of `module`.weight (the block starts on 128 boundaries, so its blocks are the whole
  // weight's). Throws InvalidInput for a weight already F8_E4M3: its checkpoint's config.json does not say so.
  Fp8HostBlock get_fp8_block(const std::string& module, const std::vector<int64_t>& shape, IndexRange rows,
                             IndexRange cols) override;

 private:
  std::unique_ptr<WeightSource> source_;
};

}  // namespace nanovllm
