#pragma once
// The prefill kernels the attention tests and benchmark compare on this device, and their names.
#include <string>
#include <vector>

#include "backend/cuda/attention.h"

namespace nanovllm::attention_test {

// Every prefill kernel that runs `args` on a device whose engine takes `engine`, each once: the engine's choice
// first; then, on Hopper (where the engine's kWgmma runs wgmma_prefill_variant(args)), the other wgmma variant
// where it can take these arguments, and the mma.sync kernel.
inline std::vector<cuda::PrefillKernel> prefill_kernels_to_compare(cuda::PrefillKernel engine,
                                                                   const cuda::PagedAttentionArgs& args) {
  using cuda::PrefillKernel;
  std::vector<PrefillKernel> kernels{engine};
  if (engine != PrefillKernel::kWgmma) return kernels;
  if (cuda::wgmma_prefill_variant(args) == PrefillKernel::kWgmmaWarpSpecialized) {
    kernels.push_back(PrefillKernel::kWgmmaTwoStage);
  } else if (cuda::prefill_warp_specialized_supports(args)) {
    kernels.push_back(PrefillKernel::kWgmmaWarpSpecialized);
  }
  kernels.push_back(PrefillKernel::kMmaSync);
  return kernels;
}

// kWgmma is named by the variant it runs for `args`.
inline std::string prefill_kernel_name(cuda::PrefillKernel kernel, const cuda::PagedAttentionArgs& args) {
  switch (kernel) {
    case cuda::PrefillKernel::kWgmma:
      return "wgmma (" + prefill_kernel_name(cuda::wgmma_prefill_variant(args), args) + ")";
    case cuda::PrefillKernel::kWgmmaTwoStage:
      return "two-stage";
    case cuda::PrefillKernel::kWgmmaWarpSpecialized:
      return "warp-specialised";
    case cuda::PrefillKernel::kMmaSync:
      return "mma.sync";
  }
  return "unknown prefill kernel " + std::to_string(static_cast<int>(kernel));
}

}  // namespace nanovllm::attention_test
