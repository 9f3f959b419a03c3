// logits[rows[i], tokens[i]] = value: bans a handful of tokens (EOS under min_tokens) before sampling.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace nanovllm::cuda {

namespace {
__global__ void set_logits_kernel(float* logits, int64_t vocab, const int* rows, const int* tokens, int n,
                                  float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) logits[static_cast<int64_t>(rows[i]) * vocab + tokens[i]] = value;
}
}  // namespace

void launch_set_logits(float* logits, int64_t vocab, const int* rows, const int* tokens, int n, float value,
                       cudaStream_t stream) {
  if (n == 0) return;
  set_logits_kernel<<<(n + 127) / 128, 128, 0, stream>>>(logits, vocab, rows, tokens, n, value);
  NANOVLLM_CHECK_LAUNCH("set_logits_kernel");
}

}  // namespace nanovllm::cuda
