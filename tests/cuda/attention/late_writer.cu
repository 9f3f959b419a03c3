#include "late_writer.h"

#include <cstdint>

#include "backend/cuda/programmatic_launch.cuh"

namespace nanovllm::attention_test {
namespace {

__device__ uint64_t global_ns() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// One CTA a copy.
__global__ void late_writer_kernel(const LateCopy* copies, uint64_t delay_ns) {
  cuda::allow_next_grid();
  cuda::wait_for_previous_grid();
  const uint64_t start = global_ns();
  while (global_ns() - start < delay_ns) {
  }
  const LateCopy c = copies[blockIdx.x];
  for (int i = threadIdx.x; i < c.bytes; i += blockDim.x)
    static_cast<char*>(c.dst)[i] = static_cast<const char*>(c.src)[i];
}

}  // namespace

void launch_late_writer(const LateCopy* copies, int count, int delay_us, cudaStream_t stream) {
  if (count <= 0) return;
  cuda::launch_programmatic("late_writer", late_writer_kernel, dim3(static_cast<unsigned>(count)), dim3(128), 0, stream,
                            copies, static_cast<uint64_t>(delay_us) * 1000);
}

}  // namespace nanovllm::attention_test
