// Embedding lookup: one block per token copies its table row with 16-byte loads and stores.
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace nanovllm::cuda {
namespace {

__global__ void embedding_kernel(const int* __restrict__ ids, const __nv_bfloat16* __restrict__ table,
                                 __nv_bfloat16* __restrict__ out, int hidden) {
  const int t = blockIdx.x;
  const int64_t row = ids[t];
  const uint4* src = reinterpret_cast<const uint4*>(table + row * hidden);
  uint4* dst = reinterpret_cast<uint4*>(out + static_cast<int64_t>(t) * hidden);
  for (int v = threadIdx.x; v < hidden / 8; v += blockDim.x) dst[v] = src[v];
}

}  // namespace

void launch_embedding(const int* ids, const __nv_bfloat16* table, __nv_bfloat16* out, int num_tokens, int hidden,
                      cudaStream_t stream) {
  if (num_tokens == 0) return;
  const int vecs = hidden / 8;
  const int threads = vecs >= 256 ? 256 : ((vecs + 31) / 32) * 32;
  embedding_kernel<<<num_tokens, threads, 0, stream>>>(ids, table, out, hidden);
  NANOVLLM_CHECK_LAUNCH("embedding_kernel");
}

}  // namespace nanovllm::cuda
