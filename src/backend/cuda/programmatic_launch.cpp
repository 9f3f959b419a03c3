#include "backend/cuda/programmatic_launch.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace nanovllm::cuda {

bool programmatic_launch_enabled() {
  // Immutable once computed: every rank of a process runs the same kind of GPU.
  static const bool enabled = [] {
    const char* setting = std::getenv("NANOVLLM_PDL");
    if (setting != nullptr && std::strcmp(setting, "0") == 0) return false;
    int device = 0, major = 0;
    NANOVLLM_CUDA_CHECK(cudaGetDevice(&device));
    NANOVLLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9;
  }();
  return enabled;
}

}  // namespace nanovllm::cuda
