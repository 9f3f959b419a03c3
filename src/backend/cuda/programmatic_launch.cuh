#pragma once
// Programmatic dependent launch (sm_90+): kernels launched with launch_programmatic() may become resident
// while the previous kernel of their stream still runs, so a decode step's ~250 small kernels stop paying a
// launch gap each. The contract every such kernel keeps: it calls start_after_previous_grid() before its
// first access to memory another kernel writes or reads, because until then the previous kernel may still be
// running. What no kernel of the step writes may be read before: constant weights (the GEMV), step metadata
// uploaded by copies, and the K/V of keys from earlier steps (decode attention). Kernels launched the ordinary
// way are fully ordered as always, so mixing both is safe.
#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/programmatic_launch.h"

namespace nanovllm::cuda {

// Lets the stream's next kernel launch now (its CTAs then wait in their own start_after_previous_grid()).
__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until the previous kernel of the stream has completed and its writes are visible; returns at once
// for a kernel launched the ordinary way.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The usual prologue: the next kernel may launch (and wait) while this one runs after its predecessor.
__device__ __forceinline__ void start_after_previous_grid() {
  allow_next_grid();
  wait_for_previous_grid();
}

// The L1 / shared split a programmatic launch asks for: the decode step's (programmatic_launch.h), or the
// driver's choice for the kernel alone (prefill attention, whose CTAs need more shared memory than the step's).
enum class SharedSplit { kStep, kKernelsOwn };

// kernel<<<grid, block, shared_bytes, stream>>>(args...), with the programmatic-serialisation attribute and the
// split's carveout when programmatic_launch_enabled(); `name` names the kernel in launch errors.
template <typename... Params, typename... Args>
void launch_programmatic_split(SharedSplit split, const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                               size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  if (programmatic_launch_enabled()) {
    attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[0].val.programmaticStreamSerializationAllowed = 1;
    const int carveout = split == SharedSplit::kStep ? step_shared_carveout_percent() : -1;
    attributes[1].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
    attributes[1].val.sharedMemCarveout = static_cast<unsigned>(carveout);
    config.attrs = attributes;
    config.numAttrs = carveout >= 0 ? 2 : 1;
  }
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) throw_cuda_error(err, (std::string("kernel ") + name).c_str(), __FILE__, __LINE__);
  check_launch(name, __FILE__, __LINE__);
}

// A kernel of the decode step: the step's split.
template <typename... Params, typename... Args>
void launch_programmatic(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                         cudaStream_t stream, Args&&... args) {
  launch_programmatic_split(SharedSplit::kStep, name, kernel, grid, block, shared_bytes, stream,
                            std::forward<Args>(args)...);
}

}  // namespace nanovllm::cuda
