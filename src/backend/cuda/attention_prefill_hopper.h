#pragma once
// The sm_90a prefill attention kernel (wgmma), private to the attention launchers.
#include <cuda_runtime.h>

#include "backend/cuda/attention.h"

namespace nanovllm::cuda::attention_detail {

// Same contract as paged_attention_prefill (arguments already validated, at least one row); `kernel` is one of
// the wgmma kernels.
void launch_hopper_prefill(const PagedAttentionArgs& a, cudaStream_t stream, PrefillKernel kernel);

}  // namespace nanovllm::cuda::attention_detail
