#pragma once
// What the cuBLASLt GEMMs (Gemm, Fp8BlockGemm) share: a matmul's descriptors owned as one value, the row bucket
// an algorithm is chosen for, and the heuristic's query with the alignment preferences both make.
#include <cublasLt.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace nanovllm::cuda {

// M rounded up to a power of two: one algorithm is chosen per bucket and reused for every M in it.
inline int gemm_row_bucket(int m) { return m <= 1 ? 1 : static_cast<int>(std::bit_ceil(static_cast<unsigned>(m))); }

// A matmul's descriptor and its A, B and C layouts (D is C: outputs are written in place) with the algorithm
// chosen for them; destroyed with it. Move-only.
struct CublasLtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};

  CublasLtPlan() = default;
  ~CublasLtPlan();
  CublasLtPlan(CublasLtPlan&& other) noexcept;
  CublasLtPlan& operator=(CublasLtPlan&& other) noexcept;
  CublasLtPlan(const CublasLtPlan&) = delete;
  CublasLtPlan& operator=(const CublasLtPlan&) = delete;
};

// Up to max_count algorithms cuBLASLt's heuristic lists for `plan`, best first, with A and B 16-byte aligned (row
// slices of activations are only that), C and D cd_alignment bytes and at most workspace_bytes of workspace. The
// status of the first call that failed, or of the heuristic itself: whether a refusal is an error is the caller's.
// The alignment (bytes, at most 16) that every row of an output whose rows start at `address` and lie
// `row_bytes` apart keeps: the largest power of two dividing both (address 0: the rows alone).
inline uint32_t output_alignment(uintptr_t address, size_t row_bytes) {
  const uintptr_t bits = address | row_bytes | 16u;
  return static_cast<uint32_t>(bits & (~bits + 1u));
}

cublasStatus_t list_algorithms(cublasLtHandle_t handle, const CublasLtPlan& plan, size_t workspace_bytes,
                               uint32_t cd_alignment, int max_count, std::vector<cublasLtMatmulAlgo_t>& algos);

}  // namespace nanovllm::cuda
