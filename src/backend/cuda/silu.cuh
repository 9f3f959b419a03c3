#pragma once
// SiLU(gate) x up in fp32, the one formula of every kernel that applies it (silu_and_mul and the GEMV's fused
// epilogue), so that both give the same bits from the same bf16 gate and up.
#include <cuda_runtime.h>

namespace nanovllm::cuda {

__device__ __forceinline__ float silu_mul(float gate, float up) { return gate / (1.0f + __expf(-gate)) * up; }

}  // namespace nanovllm::cuda
