// A read-only kernel for measuring device-memory read bandwidth: 16-byte loads, four in flight per thread,
// an XOR of everything read so the compiler cannot drop the loads; one word per block is written.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace nanovllm::cuda {
namespace {

__global__ void read_only_kernel(const uint4* __restrict__ src, size_t n, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = src[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  for (int offset = 16; offset > 0; offset >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, offset);
  if (threadIdx.x == 0) sink[blockIdx.x] = acc;
}

}  // namespace

void launch_read_only(const void* src, size_t bytes, unsigned* sink, int blocks, cudaStream_t stream) {
  read_only_kernel<<<blocks, 512, 0, stream>>>(static_cast<const uint4*>(src), bytes / 16, sink);
  NANOVLLM_CHECK_LAUNCH("read_only_kernel");
}

}  // namespace nanovllm::cuda
