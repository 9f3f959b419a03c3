// A step's metadata copied from pinned host memory by one kernel (Backend::upload_ranges). The host area is mapped
// at the same address under unified addressing, so each thread reads it over the bus. One launch replaces a copy
// engine's transfer, whose start cost each decode step ~7 µs of the idle chain between two graphs on an H200.
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace nanovllm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocksPerRange = 32;

__global__ void __launch_bounds__(kThreads) upload_ranges_kernel(const UploadRangesArgs a) {
  const int r = blockIdx.y;
  const char* src = a.host + a.offset[r];
  char* dst = a.dst + a.offset[r];
  const uint32_t words = a.words[r];
  const uint32_t first = blockIdx.x * kThreads + threadIdx.x, stride = gridDim.x * kThreads;
  if (r == a.ids_range && a.ids != nullptr) {  // words holding -1 - row take that row of the device's ids
    const auto* in = reinterpret_cast<const int32_t*>(src);
    auto* out = reinterpret_cast<int32_t*>(dst);
    for (uint32_t i = first; i < words; i += stride) {
      const int32_t v = in[i];
      out[i] = v < 0 ? a.ids[-1 - v] : v;
    }
    return;
  }
  const uint32_t vecs = words / 4;
  for (uint32_t i = first; i < vecs; i += stride)
    reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  for (uint32_t i = vecs * 4 + first; i < words; i += stride)
    reinterpret_cast<uint32_t*>(dst)[i] = reinterpret_cast<const uint32_t*>(src)[i];
}

}  // namespace

void launch_upload_ranges(const UploadRangesArgs& args, cudaStream_t stream) {
  if (args.num_ranges == 0) return;
  uint32_t most = 0;
  for (int r = 0; r < args.num_ranges; ++r) most = most > args.words[r] ? most : args.words[r];
  const uint32_t per_block = kThreads * 4;  // words a block moves in one pass of 16-byte loads
  const int blocks = static_cast<int>((most + per_block - 1) / per_block);
  const dim3 grid(blocks < 1 ? 1 : (blocks > kMaxBlocksPerRange ? kMaxBlocksPerRange : blocks), args.num_ranges);
  upload_ranges_kernel<<<grid, kThreads, 0, stream>>>(args);
  NANOVLLM_CHECK_LAUNCH("upload_ranges_kernel");
}

}  // namespace nanovllm::cuda
