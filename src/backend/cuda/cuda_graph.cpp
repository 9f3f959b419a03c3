#include "backend/cuda/cuda_graph.h"

namespace nanovllm {

CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}

}  // namespace nanovllm
