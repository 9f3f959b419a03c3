#pragma once
// Every CUDA runtime / cuBLASLt call and every kernel launch is checked; a failure becomes an EngineError
// naming the call (or kernel), the error string and where it happened.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "common/error.h"

namespace nanovllm::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  throw EngineError(std::string(what) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") at " +
                    file + ":" + std::to_string(line));
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* what, const char* file, int line) {
  throw EngineError(std::string(what) + " failed: cuBLAS status " + std::to_string(static_cast<int>(status)) + " (" +
                    cublasLtGetStatusString(status) + ") at " + file + ":" + std::to_string(line));
}

// After a kernel launch: launch-configuration errors (and sticky errors from earlier work) surface here.
inline void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, (std::string("kernel ") + kernel).c_str(), file, line);
}

}  // namespace nanovllm::cuda

#define NANOVLLM_CUDA_CHECK(call)                                                                                   \
  do {                                                                                                              \
    const cudaError_t nanovllm_err_ = (call);                                                                       \
    if (nanovllm_err_ != cudaSuccess) ::nanovllm::cuda::throw_cuda_error(nanovllm_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define NANOVLLM_CUBLAS_CHECK(call)                                                      \
  do {                                                                                   \
    const cublasStatus_t nanovllm_status_ = (call);                                      \
    if (nanovllm_status_ != CUBLAS_STATUS_SUCCESS)                                       \
      ::nanovllm::cuda::throw_cublas_error(nanovllm_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define NANOVLLM_CHECK_LAUNCH(kernel_name) ::nanovllm::cuda::check_launch(kernel_name, __FILE__, __LINE__)
