#pragma once
// Functions compiled for both the host and CUDA devices: the CPU and GPU paths share their arithmetic.

#if defined(__CUDACC__)
#define NANOVLLM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define NANOVLLM_HOST_DEVICE inline
#endif
