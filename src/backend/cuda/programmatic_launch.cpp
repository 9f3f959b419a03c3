#include "backend/cuda/programmatic_launch.h"

#include <cuda_runtime.h>

#include <algorithm>
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

int step_shared_carveout_percent() {
  static const int percent = [] {
    if (!programmatic_launch_enabled()) return -1;
    int device = 0, shared_per_sm = 0;
    NANOVLLM_CUDA_CHECK(cudaGetDevice(&device));
    NANOVLLM_CUDA_CHECK(cudaDeviceGetAttribute(&shared_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    if (shared_per_sm <= 0) return -1;
    return std::min(100, (100 * kStepSharedMemoryBytes + shared_per_sm - 1) / shared_per_sm);
  }();
  return percent;
}

}  // namespace nanovllm::cuda
