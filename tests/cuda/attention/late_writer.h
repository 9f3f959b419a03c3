#pragma once
// A stand-in for the kernel ahead of decode attention in a decode step (the KV write): launched the way the step
// launches it (programmatic_launch.cuh), it lets the next kernel start at once and only writes its data after a
// delay, so a kernel that reads that data before its wait for the previous grid reads the old bytes.
#include <cuda_runtime.h>

namespace nanovllm::attention_test {

struct LateCopy {
  void* dst;
  const void* src;
  int bytes;
};

// Enqueues on `stream` a kernel that carries out `count` copies (the array and every pointer in it on the device)
// `delay_us` microseconds after it starts.
void launch_late_writer(const LateCopy* copies, int count, int delay_us, cudaStream_t stream);

}  // namespace nanovllm::attention_test
