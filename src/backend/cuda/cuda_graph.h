#pragma once
// An instantiated CUDA graph (RAII over cudaGraphExec_t). Made by CudaBackend::capture, run by
// CudaBackend::replay; movable, not copyable.
#include <cuda_runtime.h>

#include <utility>

namespace nanovllm {

class CudaGraph {
 public:
  CudaGraph() = default;
  explicit CudaGraph(cudaGraphExec_t exec) : exec_(exec) {}
  ~CudaGraph();
  CudaGraph(CudaGraph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  cudaGraphExec_t get() const { return exec_; }
  bool empty() const { return exec_ == nullptr; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace nanovllm
