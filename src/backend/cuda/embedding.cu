// Embedding lookup: one block per token copies its table row with 16-byte loads and stores (zeros for ids
// outside a vocabulary-parallel rank's rows).
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/programmatic_launch.cuh"

namespace nanovllm::cuda {
namespace {

__global__ void embedding_kernel(const int* __restrict__ ids, const __nv_bfloat16* __restrict__ table,
                                 __nv_bfloat16* __restrict__ out, int hidden, int64_t vocab_start, int64_t table_rows) {
  start_after_previous_grid();
  const int t = blockIdx.x;
  const int64_t row = ids[t] - vocab_start;
  uint4* dst = reinterpret_cast<uint4*>(out + static_cast<int64_t>(t) * hidden);
  if (row < 0 || row >= table_rows) {
    for (int v = threadIdx.x; v < hidden / 8; v += blockDim.x) dst[v] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(table + row * hidden);
  for (int v = threadIdx.x; v < hidden / 8; v += blockDim.x) dst[v] = src[v];
}

}  // namespace

void launch_embedding(const int* ids, const __nv_bfloat16* table, __nv_bfloat16* out, int num_tokens, int hidden,
                      int64_t vocab_start, int64_t table_rows, cudaStream_t stream) {
  if (num_tokens == 0) return;
  const int vecs = hidden / 8;
  const int threads = vecs >= 256 ? 256 : ((vecs + 31) / 32) * 32;
  launch_programmatic("embedding_kernel", embedding_kernel, dim3(static_cast<unsigned>(num_tokens)),
                      dim3(static_cast<unsigned>(threads)), 0, stream, ids, table, out, hidden, vocab_start,
                      table_rows);
}

}  // namespace nanovllm::cuda
