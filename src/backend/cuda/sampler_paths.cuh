#pragma once
// Host-only: launch_sample with its fast path forced, so tests can check the path a device would not pick
// (the chunked path serves GPUs without thread-block clusters, and vocabularies above 163840).
#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/kernels.h"

namespace nanovllm::cuda {

enum class PlainSamplerPath {
  kAuto,     // clusters when the device has them and the vocabulary fits (launch_sample)
  kCluster,  // one pass, one thread-block cluster per row (sm_90+)
  kChunked,  // two reads of the logits, three kernels, the workspace of sampler_workspace_bytes
};

void launch_sample_via(const SamplerArgs& args, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       PlainSamplerPath path);

}  // namespace nanovllm::cuda
