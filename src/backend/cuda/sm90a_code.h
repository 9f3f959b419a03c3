#pragma once
// Whether this build's sm_90a code (wgmma, bulk copies, mbarriers) runs on the current device. A build for sm_90a
// and older GPUs holds those kernels everywhere, but their bodies are empty outside sm_90a code, so callers pick them
// only where this is true.

namespace nanovllm::cuda {

// True when the build has sm_90a code (CMAKE_CUDA_ARCHITECTURES names 90a).
bool sm90a_code_built();

// True when sm90a_code_built() and the current device is compute capability 9.0. Asks the driver each call: under
// tensor parallelism each rank's device is its own.
bool sm90a_code_runs_here();

}  // namespace nanovllm::cuda
