#include "engine/device_support.h"

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"

#ifdef NANOVLLM_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#endif

namespace nanovllm {

bool cuda_available() {
#ifdef NANOVLLM_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return std::make_unique<CpuBackend>();
  if (device == "cuda" || device == "auto") {
#ifdef NANOVLLM_HAVE_CUDA
    if (cuda_available()) return std::make_unique<CudaBackend>(0);
#endif
    if (device == "auto") return std::make_unique<CpuBackend>();
#ifdef NANOVLLM_HAVE_CUDA
    throw InvalidInput("device 'cuda' was asked for but no CUDA GPU is visible");
#else
    throw InvalidInput("device 'cuda' was asked for but this build has no CUDA backend (nvcc was not found)");
#endif
  }
  throw InvalidInput("unknown device '" + device + "' (expected auto, cpu or cuda)");
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
