#include "backend/cuda/cublaslt_plan.h"

#include <utility>

namespace nanovllm::cuda {

CublasLtPlan::~CublasLtPlan() {
  if (desc) cublasLtMatmulDescDestroy(desc);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (c) cublasLtMatrixLayoutDestroy(c);
}

CublasLtPlan::CublasLtPlan(CublasLtPlan&& other) noexcept
    : desc(std::exchange(other.desc, nullptr)),
      a(std::exchange(other.a, nullptr)),
      b(std::exchange(other.b, nullptr)),
      c(std::exchange(other.c, nullptr)),
      algo(other.algo) {}

CublasLtPlan& CublasLtPlan::operator=(CublasLtPlan&& other) noexcept {
  if (this != &other) {
    CublasLtPlan old(std::move(*this));  // releases this plan's descriptors at the end of the scope
    desc = std::exchange(other.desc, nullptr);
    a = std::exchange(other.a, nullptr);
    b = std::exchange(other.b, nullptr);
    c = std::exchange(other.c, nullptr);
    algo = other.algo;
  }
  return *this;
}

cublasStatus_t list_algorithms(cublasLtHandle_t handle, const CublasLtPlan& plan, size_t workspace_bytes,
                               uint32_t cd_alignment, int max_count, std::vector<cublasLtMatmulAlgo_t>& algos) {
  algos.clear();
  cublasLtMatmulPreference_t preference = nullptr;
  cublasStatus_t s = cublasLtMatmulPreferenceCreate(&preference);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const uint32_t ab_alignment = 16;
  s = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                           sizeof(workspace_bytes));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES}) {
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulPreferenceSetAttribute(preference, attr, &ab_alignment, sizeof(ab_alignment));
  }
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulPreferenceSetAttribute(preference, attr, &cd_alignment, sizeof(cd_alignment));
  }
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max_count));
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.c, plan.c, preference, max_count,
                                       results.data(), &found);
  }
  cublasLtMatmulPreferenceDestroy(preference);
  for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < found; ++i) algos.push_back(results[static_cast<size_t>(i)].algo);
  return s;
}

}  // namespace nanovllm::cuda
