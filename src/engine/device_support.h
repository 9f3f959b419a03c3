#pragma once
// The few places where the engine must know which backend it runs on: choosing one, asking the device how
// much memory is free, and decode CUDA graphs. Everything else goes through the Backend interface.
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "parallel/communicator.h"

namespace nanovllm {

// GPUs visible to this build (0 without CUDA or without a device).
int cuda_device_count();
bool cuda_available();
// The backends of a tensor-parallel group (size 1: one backend), rank r on GPU r, or `size` CPU backends
// sharing the threads. device "auto" picks CUDA when this build has it and a GPU is present, else the CPU.
// Throws InvalidInput for "cuda" without a GPU, for fewer GPUs than ranks, and for GPU ranks without NCCL.
std::vector<std::unique_ptr<Backend>> make_rank_backends(const std::string& device, int size);
// Communicators for those backends: NCCL between GPUs, host memory between CPU ranks.
std::unique_ptr<CommunicatorGroup> make_communicator_group(const std::vector<Backend*>& backends);

struct DeviceMemory {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
// Device memory of a GPU backend; nullopt for the CPU.
std::optional<DeviceMemory> device_memory(Backend& backend);

// Captured decode steps per batch bucket, replayed instead of launching every op (CUDA only).
class DecodeGraphs {
 public:
  virtual ~DecodeGraphs() = default;
  // Smallest captured bucket >= num_seqs, or 0 when none fits.
  virtual int bucket_for(int num_seqs) const = 0;
  virtual void replay(int bucket) = 0;
};
// Captures `enqueue(bucket)` once per bucket; nullptr when the backend cannot capture.
std::unique_ptr<DecodeGraphs> capture_decode_graphs(Backend& backend, const std::vector<int>& buckets,
                                                    const std::function<void(int)>& enqueue);

}  // namespace nanovllm

namespace nanovllm {
// Device read bandwidth in GB/s measured by a streaming kernel (CUDA), or nullopt on the CPU.
std::optional<double> measure_read_bandwidth_gbs(Backend& backend);
// The GPU's name, or "cpu".
std::string device_name(Backend& backend);
}  // namespace nanovllm
