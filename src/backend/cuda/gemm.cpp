#include "backend/cuda/gemm.h"

#include <algorithm>

#include <bit>
#include <string>

#include "backend/cuda/call_timing.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"

namespace nanovllm::cuda {
namespace {

int bucket_of(int m) { return m <= 1 ? 1 : static_cast<int>(std::bit_ceil(static_cast<unsigned>(m))); }

cudaDataType_t cuda_type(DType t) { return t == DType::F32 ? CUDA_R_32F : CUDA_R_16BF; }

// The row counts measure_small_row_paths times: index i is 2^i rows.
constexpr std::array<int, 5> kMeasuredRows{1, 2, 4, 8, 16};
static_assert(kMeasuredRows.back() == kGemvMaxTokens);

}  // namespace

Gemm::Gemm(void* workspace, size_t workspace_bytes) : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  int device = 0;
  NANOVLLM_CUDA_CHECK(cudaGetDevice(&device));
  NANOVLLM_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  NANOVLLM_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Gemm::~Gemm() {
  for (auto& [key, plan] : plans_) destroy(plan);
  cublasLtDestroy(handle_);
}

void Gemm::destroy(Plan& plan) {
  if (plan.desc) cublasLtMatmulDescDestroy(plan.desc);
  if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
  plan = Plan{};
}

Gemm::Plan Gemm::create_plan(const ShapeKey& key) {
  Plan plan;
  try {
    NANOVLLM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    NANOVLLM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
    NANOVLLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
    if (key.bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_16BF;
      NANOVLLM_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
      NANOVLLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                           sizeof(bias_type)));
    }
    // A = W as column-major [K, N] (op T), B = x as column-major [K, M], C = out as column-major [N, M].
    NANOVLLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, key.k, key.n, key.k));
    NANOVLLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, key.k, key.m, key.k));
    NANOVLLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, cuda_type(key.out), key.n, key.m, key.n));
  } catch (...) {
    destroy(plan);
    throw;
  }
  return plan;
}

std::vector<cublasLtMatmulAlgo_t> Gemm::heuristic(const Plan& plan, const ShapeKey& key, int max_count) {
  cublasLtMatmulPreference_t preference = nullptr;
  NANOVLLM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max_count));
  int found = 0;
  const cublasStatus_t status = [&] {
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &workspace_bytes_, sizeof(workspace_bytes_));
    // Row slices of activations are only guaranteed 16-byte aligned (K is a multiple of 8). Output rows are
    // N elements apart, so an odd vocabulary (N % 8 != 0) leaves them only 2- or 4-byte aligned.
    const uint32_t ab_alignment = 16;
    const uint32_t row_bytes = static_cast<uint32_t>(key.n) * (key.out == DType::F32 ? 4u : 2u);
    const uint32_t cd_alignment =
        std::min<uint32_t>(16u, row_bytes & (~row_bytes + 1u));  // largest power of 2 dividing
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES}) {
      if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(preference, attr, &ab_alignment, sizeof(ab_alignment));
    }
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(preference, attr, &cd_alignment, sizeof(cd_alignment));
    }
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, preference, max_count,
                                         results.data(), &found);
    }
    return s;
  }();
  cublasLtMatmulPreferenceDestroy(preference);
  NANOVLLM_CUBLAS_CHECK(status);
  if (found == 0) {
    throw EngineError("cuBLASLt has no algorithm for linear M=" + std::to_string(key.m) +
                      " N=" + std::to_string(key.n) + " K=" + std::to_string(key.k));
  }
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i) algos.push_back(results[static_cast<size_t>(i)].algo);
  return algos;
}

void Gemm::run(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, void* out,
               DType out_dtype, int m, int n, int k, cudaStream_t stream) {
  const GemvArgs gemv{x, weight, bias, out, out_dtype, m, n, k};
  if (gemv_supports(gemv) && !measured_cublas_faster(m, n, k, out_dtype, bias != nullptr))
    return launch_gemv(gemv, sm_count_, stream);
  run_cublaslt(x, weight, bias, out, out_dtype, m, n, k, stream);
}

bool Gemm::measured_cublas_faster(int m, int n, int k, DType out_dtype, bool bias) const {
  if (bias || m < 1 || m > kGemvMaxTokens) return false;
  const auto it = cublas_at_small_rows_.find({n, k, out_dtype});
  return it != cublas_at_small_rows_.end() &&
         it->second[static_cast<size_t>(std::bit_width(static_cast<unsigned>(bucket_of(m))) - 1)];
}

void Gemm::measure_small_row_paths(const __nv_bfloat16* weight, DType out_dtype, int n, int k,
                                   const __nv_bfloat16* x_scratch, void* out_scratch, cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  NANOVLLM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone)
    throw EngineError("Gemm::measure_small_row_paths: called while the stream is being captured");
  constexpr int kTimedCalls = 5;
  std::array<bool, kMeasuredRows.size()> cublas{};
  for (size_t i = 0; i < kMeasuredRows.size(); ++i) {
    const int m = kMeasuredRows[i];
    const GemvArgs gemv{x_scratch, weight, nullptr, out_scratch, out_dtype, m, n, k};
    if (!gemv_supports(gemv)) return;  // run() never sends this shape to the GEMV
    const float gemv_ms = median_call_ms([&] { launch_gemv(gemv, sm_count_, stream); }, stream, 1, kTimedCalls);
    const float cublas_ms =
        median_call_ms([&] { run_cublaslt(x_scratch, weight, nullptr, out_scratch, out_dtype, m, n, k, stream); },
                       stream, 1, kTimedCalls);
    cublas[i] = cublas_ms < gemv_ms * (1.0 - kCublasMargin);
  }
  cublas_at_small_rows_[{n, k, out_dtype}] = cublas;
}

Gemm::Plan& Gemm::plan_for(const ShapeKey& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan plan = create_plan(key);
  try {
    const ShapeKey bucket{bucket_of(key.m), key.n, key.k, key.out, key.bias};
    auto algo = algo_by_bucket_.find(bucket);
    if (algo == algo_by_bucket_.end()) {
      Plan bucket_plan = bucket.m == key.m ? Plan{} : create_plan(bucket);
      try {
        algo = algo_by_bucket_.emplace(bucket, choose_algo(bucket.m == key.m ? plan : bucket_plan, bucket)).first;
      } catch (...) {
        destroy(bucket_plan);
        throw;
      }
      destroy(bucket_plan);
    }
    plan.algo = algo->second;
  } catch (...) {
    destroy(plan);
    throw;
  }
  return plans_.emplace(key, plan).first->second;
}

void Gemm::run_cublaslt(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, void* out,
                        DType out_dtype, int m, int n, int k, cudaStream_t stream) {
  if (m == 0) return;
  // cuBLASLt's bias epilogue is used for bf16 outputs; an fp32 output (the lm_head) gets a separate add.
  const bool epilogue_bias = bias != nullptr && out_dtype == DType::BF16;
  const ShapeKey key{m, n, k, out_dtype, epilogue_bias};
  Plan& plan = plan_for(key);
  if (epilogue_bias) {
    // The attribute's value is the device pointer itself, so its size is that of a pointer.
    const void* bias_ptr = bias;
    NANOVLLM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  auto matmul = [&] {
    return cublasLtMatmul(handle_, plan.desc, &alpha, weight, plan.a, x, plan.b, &beta, out, plan.c, out, plan.c,
                          &plan.algo, workspace_, workspace_bytes_, stream);
  };
  cublasStatus_t status = matmul();
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    // The bucket's algorithm does not fit this exact M: ask for one that does and keep it for this shape.
    plan.algo = choose_algo(plan, key);
    status = matmul();
  }
  NANOVLLM_CUBLAS_CHECK(status);
  if (bias != nullptr && !epilogue_bias) launch_add_bias_f32(static_cast<float*>(out), bias, m, n, stream);
}

std::vector<cublasLtMatmulAlgo_t> Gemm::listed_algorithms(int m, int n, int k, DType out_dtype, int max_count) {
  const ShapeKey key{m, n, k, out_dtype, false};
  return heuristic(plan_for(key), key, max_count);
}

bool Gemm::run_listed(const cublasLtMatmulAlgo_t& algo, const __nv_bfloat16* x, const __nv_bfloat16* weight, void* out,
                      DType out_dtype, int m, int n, int k, cudaStream_t stream) {
  const Plan& plan = plan_for(ShapeKey{m, n, k, out_dtype, false});
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(handle_, plan.desc, &alpha, weight, plan.a, x, plan.b, &beta, out, plan.c, out, plan.c, &algo,
                        workspace_, workspace_bytes_, stream) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace nanovllm::cuda
