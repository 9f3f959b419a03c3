#include "engine/device_support.h"

#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "parallel/host_communicator.h"

#ifdef NANOVLLM_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#endif
#ifdef NANOVLLM_HAVE_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace nanovllm {

int cuda_device_count() {
#ifdef NANOVLLM_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace {
// "auto" | "cpu" | "cuda" -> whether the backend is CUDA; throws for "cuda" without a GPU or an unknown name.
bool resolves_to_cuda(const std::string& device) {
  if (device == "cpu") return false;
  if (device == "auto") return cuda_available();
  if (device == "cuda") {
#ifdef NANOVLLM_HAVE_CUDA
    if (cuda_available()) return true;
    throw InvalidInput("device 'cuda' was asked for but no CUDA GPU is visible");
#else
    throw InvalidInput("device 'cuda' was asked for but this build has no CUDA backend (nvcc was not found)");
#endif
  }
  throw InvalidInput("unknown device '" + device + "' (expected auto, cpu or cuda)");
}

RankBackends make_cpu_ranks(int size) {
  RankBackends ranks;
  // Ranks run at once: each gets its share of the threads one backend would use (OMP_NUM_THREADS or the cores).
  const int threads = std::max(1, CpuBackend().num_threads() / size);
  for (int r = 0; r < size; ++r) ranks.backends.push_back(std::make_unique<CpuBackend>(threads));
  if (size > 1) ranks.comms = std::make_unique<HostCommunicatorGroup>(size);
  return ranks;
}

RankBackends make_cuda_ranks(int size) {
#ifndef NANOVLLM_HAVE_NCCL
  if (size > 1)  // before any GPU is touched
    throw InvalidInput("tensor_parallel_size " + std::to_string(size) +
                       " on GPUs needs NCCL, which this build did not find (the CPU backend runs it without)");
#endif
  const int count = cuda_device_count();
  if (count < size)
    throw InvalidInput("tensor_parallel_size " + std::to_string(size) + " needs " + std::to_string(size) +
                       " GPUs, but " + std::to_string(count) + " are visible");
#ifdef NANOVLLM_HAVE_CUDA
  RankBackends ranks;
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (int r = 0; r < size; ++r) {
    auto cuda = std::make_unique<CudaBackend>(r);
    devices.push_back(cuda->device_index());
    streams.push_back(cuda->stream());
    ranks.backends.push_back(std::move(cuda));
  }
#ifdef NANOVLLM_HAVE_NCCL
  if (size > 1) ranks.comms = std::make_unique<NcclCommunicatorGroup>(devices, streams);
#endif
  return ranks;
#else
  throw EngineError("no CUDA backend in this build");  // resolves_to_cuda() said so already
#endif
}
}  // namespace

RankBackends make_rank_backends(const std::string& device, int size) {
  return resolves_to_cuda(device) ? make_cuda_ranks(size) : make_cpu_ranks(size);
}

}  // namespace nanovllm
