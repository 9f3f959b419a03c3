#include "model/fp8_quantizing_weights.h"

#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm {

Fp8HostBlock Fp8QuantizingWeights::get_fp8_block(const std::string& module, const std::vector<int64_t>& shape,
                                                 IndexRange rows, IndexRange cols) {
  const std::string weight_name = module + ".weight";
  fp8_scale_ranges(weight_name, shape, rows, cols);
  const HostTensor weight = source_->get_block(weight_name, shape, rows, cols);
  if (weight.view.dtype == DType::F8_E4M3)
    throw InvalidInput("tensor " + quoted_text(weight_name) +
                       " is F8_E4M3, but config.json has no fp8 quantization_config to say how it is scaled");
  return to_host_block(quantize_fp8_blocks(weight.view));
}

}  // namespace nanovllm
