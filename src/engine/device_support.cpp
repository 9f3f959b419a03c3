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

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
#ifdef NANOVLLM_HAVE_CUDA
  return std::make_unique<CudaBackend>(device_index);
#else
  throw EngineError("no CUDA backend in this build (GPU " + std::to_string(device_index) + ")");
#endif
}
}  // namespace

std::vector<std::unique_ptr<Backend>> make_rank_backends(const std::string& device, int size) {
  std::vector<std::unique_ptr<Backend>> backends;
  if (!resolves_to_cuda(device)) {
    // Ranks run at once: each gets its share of the threads one backend would use (OMP_NUM_THREADS or the cores).
    const int threads = std::max(1, CpuBackend().num_threads() / size);
    for (int r = 0; r < size; ++r) backends.push_back(std::make_unique<CpuBackend>(threads));
    return backends;
  }
#ifndef NANOVLLM_HAVE_NCCL
  if (size > 1)  // before any GPU is touched
    throw InvalidInput("tensor_parallel_size " + std::to_string(size) +
                       " on GPUs needs NCCL, which this build did not find (the CPU backend runs it without)");
#endif
  const int count = cuda_device_count();
  if (count < size)
    throw InvalidInput("tensor_parallel_size " + std::to_string(size) + " needs " + std::to_string(size) +
                       " GPUs, but " + std::to_string(count) + " are visible");
  for (int r = 0; r < size; ++r) backends.push_back(make_cuda_backend(r));
  return backends;
}

std::unique_ptr<CommunicatorGroup> make_communicator_group(const std::vector<Backend*>& backends) {
  const int size = static_cast<int>(backends.size());
  if (dynamic_cast<CpuBackend*>(backends.at(0))) return std::make_unique<HostCommunicatorGroup>(size);
#ifdef NANOVLLM_HAVE_NCCL
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (Backend* b : backends) {
    auto& cuda = dynamic_cast<CudaBackend&>(*b);
    devices.push_back(cuda.device_index());
    streams.push_back(cuda.stream());
  }
  return std::make_unique<NcclCommunicatorGroup>(devices, streams);
#else
  throw EngineError("make_communicator_group: GPU ranks need NCCL, which this build lacks");  // checked earlier
#endif
}

std::optional<DeviceMemory> device_memory(Backend& backend) {
#ifdef NANOVLLM_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend)) {
    const auto info = cuda->memory_info();
    return DeviceMemory{info.free_bytes, info.total_bytes};
  }
#endif
  (void)backend;
  return std::nullopt;
}

std::optional<double> measure_read_bandwidth_gbs(Backend& backend) {
#ifdef NANOVLLM_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend)) return cuda->measure_read_bandwidth_gbs(size_t{4} << 30);
#endif
  (void)backend;
  return std::nullopt;
}

std::string device_name(Backend& backend) {
#ifdef NANOVLLM_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend)) return cuda->device_name();
#endif
  (void)backend;
  return "cpu";
}

#ifdef NANOVLLM_HAVE_CUDA
namespace {
class CudaDecodeGraphs final : public DecodeGraphs {
 public:
  CudaDecodeGraphs(CudaBackend& backend, const std::vector<int>& buckets, const std::function<void(int)>& enqueue)
      : backend_(backend), buckets_(buckets) {
    // Largest first, as nano-vLLM does, so the biggest working set is laid out first.
    for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
      const int b = *it;
      enqueue(b);  // eager run first: lazy initialisation must not happen inside a capture
      backend.synchronize();
      graphs_.emplace_back(b, backend.capture([&] { enqueue(b); }));
    }
  }
  int bucket_for(int num_seqs) const override {
    for (int b : buckets_)
      if (b >= num_seqs) return b;
    return 0;
  }
  void replay(int bucket) override {
    for (auto& [b, g] : graphs_)
      if (b == bucket) return backend_.replay(g);
    throw EngineError("no CUDA graph captured for batch " + std::to_string(bucket));
  }

 private:
  CudaBackend& backend_;
  std::vector<int> buckets_;
  std::vector<std::pair<int, CudaGraph>> graphs_;
};
}  // namespace
#endif

std::unique_ptr<DecodeGraphs> capture_decode_graphs(Backend& backend, const std::vector<int>& buckets,
                                                    const std::function<void(int)>& enqueue) {
#ifdef NANOVLLM_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend)) return std::make_unique<CudaDecodeGraphs>(*cuda, buckets, enqueue);
#endif
  (void)backend;
  (void)buckets;
  (void)enqueue;
  return nullptr;
}

}  // namespace nanovllm
