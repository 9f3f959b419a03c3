#pragma once
// The prefill kernels the attention tests and benchmark compare on this device, and their names.
#include <string>
#include <vector>

#include "backend/cuda/attention.h"

namespace nanovllm::attention_test {

// Every prefill kernel that runs `args` on a device whose engine takes `engine`, each once: the engine's choice
// first; then, on Hopper (where the engine's kWgmma runs wgmma_prefill_variant(args), or the FP8 shadow path for an
// FP8 cache's long prompts), the other wgmma variant where it can take these arguments, the FP8 shadow path where
// the engine's choice is not already it, the FP8-products kernel, and the mma.sync kernel.
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
  // The FP8 cache's shadow path wherever it can run; where kWgmma takes it (long prompts), the FP8 two-stage
  // kernel it replaced.
  if (cuda::fp8_prefill_shadow_applies(args, PrefillKernel::kWgmma)) {
    kernels.push_back(PrefillKernel::kWgmmaTwoStage);
  } else if (cuda::fp8_prefill_shadow_applies(args, PrefillKernel::kWgmmaFp8Shadow)) {
    kernels.push_back(PrefillKernel::kWgmmaFp8Shadow);
  }
  // The FP8-products kernel wherever it can run (an FP8 cache at d = 128).
  if (cuda::fp8_prefill_shadow_applies(args, PrefillKernel::kWgmmaFp8Mma))
    kernels.push_back(PrefillKernel::kWgmmaFp8Mma);
  kernels.push_back(PrefillKernel::kMmaSync);
  return kernels;
}

// kWgmma is named by the variant it runs for `args`.
inline std::string prefill_kernel_name(cuda::PrefillKernel kernel, const cuda::PagedAttentionArgs& args) {
  switch (kernel) {
    case cuda::PrefillKernel::kWgmma:
      if (cuda::fp8_prefill_shadow_applies(args, kernel)) return "wgmma (FP8 shadow)";
      return "wgmma (" + prefill_kernel_name(cuda::wgmma_prefill_variant(args), args) + ")";
    case cuda::PrefillKernel::kWgmmaFp8Shadow:
      return "FP8 shadow";
    case cuda::PrefillKernel::kWgmmaFp8Mma:
      return "FP8 products";
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
