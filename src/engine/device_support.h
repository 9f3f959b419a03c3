#pragma once
// The one place where the engine must know which backends exist: choosing one for a device name and making
// the backends of a tensor-parallel group with the communicators between them. Everything else goes through
// the Backend interface.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "parallel/communicator.h"

namespace nanovllm {

// GPUs visible to this build (0 without CUDA or without a device).
int cuda_device_count();
bool cuda_available();

// The backends of a tensor-parallel group, rank r's at r, and the communicators between them.
struct RankBackends {
  std::vector<std::unique_ptr<Backend>> backends;
  std::unique_ptr<CommunicatorGroup> comms;  // NCCL between GPUs, host memory between CPU ranks; null for one
};
// Rank r on GPU r, or `size` CPU backends sharing the threads. device "auto" picks CUDA when this build has
// it and a GPU is present, else the CPU. Throws InvalidInput for "cuda" without a GPU, for fewer GPUs than
// ranks, and for GPU ranks without NCCL.
RankBackends make_rank_backends(const std::string& device, int size);

}  // namespace nanovllm
