// Row gather (e.g. the last position of each sequence before the lm_head): one block per output row, 16-byte
// copies when the row size allows, 4-byte otherwise.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/programmatic_launch.cuh"

namespace nanovllm::cuda {
namespace {

template <class Word>
__global__ void gather_rows_kernel(const Word* __restrict__ x, const int* __restrict__ rows, Word* __restrict__ out,
                                   int64_t words_per_row) {
  start_after_previous_grid();
  const int64_t src = static_cast<int64_t>(rows[blockIdx.x]) * words_per_row;
  const int64_t dst = static_cast<int64_t>(blockIdx.x) * words_per_row;
  for (int64_t w = threadIdx.x; w < words_per_row; w += blockDim.x) out[dst + w] = x[src + w];
}

}  // namespace

void launch_gather_rows(const void* x, const int* rows, void* out, int num_rows, size_t row_bytes,
                        cudaStream_t stream) {
  if (num_rows == 0 || row_bytes == 0) return;
  const dim3 grid(static_cast<unsigned>(num_rows)), block(256);
  const auto words = [&](size_t word_bytes) { return static_cast<int64_t>(row_bytes / word_bytes); };
  if (row_bytes % 16 == 0) {
    launch_programmatic("gather_rows_kernel", gather_rows_kernel<uint4>, grid, block, 0, stream,
                        static_cast<const uint4*>(x), rows, static_cast<uint4*>(out), words(16));
  } else if (row_bytes % 4 == 0) {
    launch_programmatic("gather_rows_kernel", gather_rows_kernel<unsigned>, grid, block, 0, stream,
                        static_cast<const unsigned*>(x), rows, static_cast<unsigned*>(out), words(4));
  } else {
    launch_programmatic("gather_rows_kernel", gather_rows_kernel<unsigned char>, grid, block, 0, stream,
                        static_cast<const unsigned char*>(x), rows, static_cast<unsigned char*>(out), words(1));
  }
}

}  // namespace nanovllm::cuda
