#pragma once
// The sm_90a prefill attention kernel (wgmma), private to the attention launchers.
#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/attention.h"

namespace nanovllm::cuda::attention_detail {

// The warp-specialised kernel's TMA box: 64 keys of one block (so blocks of at least 64 keys) x 64 values.
inline constexpr int kTmaBoxKeys = 64;

// Same contract as paged_attention_prefill (arguments already validated, at least one row); `kernel` is one of
// the wgmma kernels.
void launch_hopper_prefill(const PagedAttentionArgs& a, cudaStream_t stream, PrefillKernel kernel);

// An FP8-cache prefill through a bf16 shadow of its blocks (attention_prefill_fp8_shadow.cu); throws EngineError
// naming what is missing where it cannot run.
void launch_fp8_shadow_prefill(const PagedAttentionArgs& a, void* shadow, size_t shadow_bytes, cudaStream_t stream);

}  // namespace nanovllm::cuda::attention_detail
