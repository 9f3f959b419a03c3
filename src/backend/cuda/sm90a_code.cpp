#include "backend/cuda/sm90a_code.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace nanovllm::cuda {

bool sm90a_code_built() {
#ifdef NANOVLLM_CUDA_HAS_SM90A
  return true;
#else
  return false;
#endif
}

bool sm90a_code_runs_here() {
  if (!sm90a_code_built()) return false;
  int device = 0, major = 0, minor = 0;
  NANOVLLM_CUDA_CHECK(cudaGetDevice(&device));
  NANOVLLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  NANOVLLM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

}  // namespace nanovllm::cuda
