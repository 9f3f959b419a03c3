#include "backend/cuda/gemm.h"

#include <algorithm>

#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "backend/cuda/call_timing.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sm90a_code.h"
#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm::cuda {
namespace {

cudaDataType_t cuda_type(DType t) { return t == DType::F32 ? CUDA_R_32F : CUDA_R_16BF; }

// Arrival counters for the skinny GEMM's K-split tiles: enough for 64-row tiles of weights up to 256 Ki rows.
constexpr int kSkinnyCounters = 4096;

// The row counts measure_small_row_paths times: index i is 2^i rows.
constexpr std::array<int, 5> kMeasuredRows{1, 2, 4, 8, 16};
static_assert(kMeasuredRows.back() == kGemvMaxTokensAnyWeight);  // and the weights timed take no more

}  // namespace

Gemm::Gemm(void* workspace, size_t workspace_bytes) : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  int device = 0;
  NANOVLLM_CUDA_CHECK(cudaGetDevice(&device));
  NANOVLLM_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  NANOVLLM_CUBLAS_CHECK(cublasLtCreate(&handle_));
  unsigned* counters = nullptr;
  NANOVLLM_CUDA_CHECK(cudaMalloc(&counters, kSkinnyCounters * sizeof(unsigned)));
  skinny_counters_.reset(counters);
  NANOVLLM_CUDA_CHECK(cudaMemset(counters, 0, kSkinnyCounters * sizeof(unsigned)));
  // NANOVLLM_SKINNY_GEMM=N sends it no calls of more than N rows (0: none; A/B runs).
  if (const char* rows = std::getenv("NANOVLLM_SKINNY_GEMM"); rows != nullptr && *rows != '\0') {
    int value = 0;
    const char* end = rows + std::strlen(rows);
    const auto [at, error] = std::from_chars(rows, end, value);
    if (error != std::errc() || at != end || value < 0)
      throw InvalidInput("NANOVLLM_SKINNY_GEMM is " + quoted_text(rows) + "; expected a row count (0: none)");
    skinny_max_rows_ = value;
  }
}

void Gemm::DeviceFree::operator()(unsigned* p) const { cudaFree(p); }

Gemm::~Gemm() {
  plans_.clear();  // the descriptors before the handle
  cublasLtDestroy(handle_);
}

Gemm::Plan Gemm::create_plan(const ShapeKey& key) {
  Plan plan;  // its descriptors are released if a call below throws
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
    NANOVLLM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  // A = W as column-major [K, N] (op T), B = x as column-major [K, M], C = out as column-major [N, M].
  NANOVLLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, key.k, key.n, key.k));
  NANOVLLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, key.k, key.m, key.k));
  NANOVLLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, cuda_type(key.out), key.n, key.m, key.n));
  return plan;
}

std::vector<cublasLtMatmulAlgo_t> Gemm::heuristic(const Plan& plan, const ShapeKey& key, int max_count) {
  // Output rows are N elements apart, so an odd vocabulary (N % 8 != 0) leaves them only 2- or 4-byte aligned.
  const uint32_t row_bytes = static_cast<uint32_t>(key.n) * (key.out == DType::F32 ? 4u : 2u);
  const uint32_t cd_alignment = output_alignment(0, row_bytes);
  std::vector<cublasLtMatmulAlgo_t> algos;
  NANOVLLM_CUBLAS_CHECK(list_algorithms(handle_, plan, workspace_bytes_, cd_alignment, max_count, algos));
  if (algos.empty()) {
    throw EngineError("cuBLASLt has no algorithm for linear M=" + std::to_string(key.m) +
                      " N=" + std::to_string(key.n) + " K=" + std::to_string(key.k));
  }
  return algos;
}

void Gemm::run(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, void* out,
               DType out_dtype, int m, int n, int k, cudaStream_t stream) {
  if (!measured_cublas_faster(m, n, k, out_dtype, bias != nullptr) &&
      run_gemv_or_skinny(GemvArgs{x, weight, bias, out, out_dtype, m, n, k}, stream))
    return;
  run_cublaslt(x, weight, bias, out, out_dtype, m, n, k, stream);
}

bool Gemm::run_gemv_or_skinny(const GemvArgs& args, cudaStream_t stream) {
  const bool gemv = gemv_supports(args);
  // FP8 codes and fp32 out are the GEMV's alone.
  if (args.weight != nullptr && args.out_dtype == DType::BF16) {
    const SkinnyGemmArgs skinny = skinny_gemm_args(args);
    const bool skinny_first =
        !gemv || skinny_gemm_preferred_over_gemv(skinny.tokens, skinny_gemm_weight_rows(skinny), skinny.k);
    if (skinny_first && skinny_takes(skinny)) {
      launch_skinny_gemm(skinny, skinny_workspace(), sm_count_, stream);
      return true;
    }
  }
  if (!gemv) return false;
  launch_gemv(args, sm_count_, stream);
  return true;
}

SkinnyGemmWorkspace Gemm::skinny_workspace() const {
  return {static_cast<float*>(workspace_), workspace_bytes_ / sizeof(float), skinny_counters_.get(), kSkinnyCounters};
}

int Gemm::skinny_routed_rows(int64_t weight_elements) const {
  return std::min(skinny_max_rows_, skinny_gemm_route_max_tokens(weight_elements));
}

int Gemm::skinny_max_tokens(int64_t weight_elements) const {
  return sm90a_code_runs_here() ? skinny_routed_rows(weight_elements) : 0;
}

bool Gemm::skinny_takes(const SkinnyGemmArgs& args) const {
  // The row checks before the device's: they refuse prefill calls without asking the driver.
  return args.tokens > kGemvMaxTokensAnyWeight &&
         args.tokens <= skinny_routed_rows(int64_t{skinny_gemm_weight_rows(args)} * args.k) &&
         skinny_gemm_unsupported_because(args).empty() && sm90a_code_runs_here();
}

bool Gemm::measured_cublas_faster(int m, int n, int k, DType out_dtype, bool bias) const {
  if (bias || m < 1 || m > kGemvMaxTokensAnyWeight) return false;
  const auto it = cublas_at_small_rows_.find({n, k, out_dtype});
  return it != cublas_at_small_rows_.end() &&
         it->second[static_cast<size_t>(std::bit_width(static_cast<unsigned>(gemm_row_bucket(m))) - 1)];
}

void Gemm::measure_small_row_paths(const __nv_bfloat16* weight, DType out_dtype, int n, int k,
                                   const __nv_bfloat16* x_scratch, void* out_scratch, cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  NANOVLLM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone)
    throw EngineError("Gemm::measure_small_row_paths: called while the stream is being captured");
  // Whether the GEMV takes the shape does not depend on the row count (1-16): run() never sends it there if not.
  if (!gemv_supports(GemvArgs{x_scratch, weight, nullptr, out_scratch, out_dtype, 1, n, k})) return;
  constexpr int kTimedCalls = 5;
  std::array<bool, kMeasuredRows.size()> cublas{};
  for (size_t i = 0; i < kMeasuredRows.size(); ++i) {
    const int m = kMeasuredRows[i];
    const GemvArgs gemv{x_scratch, weight, nullptr, out_scratch, out_dtype, m, n, k};
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
  const ShapeKey bucket{gemm_row_bucket(key.m), key.n, key.k, key.out, key.bias};
  auto algo = algo_by_bucket_.find(bucket);
  if (algo == algo_by_bucket_.end()) {
    const cublasLtMatmulAlgo_t chosen =
        bucket.m == key.m ? choose_algo(plan, bucket) : choose_algo(create_plan(bucket), bucket);
    algo = algo_by_bucket_.emplace(bucket, chosen).first;
  }
  plan.algo = algo->second;
  return plans_.emplace(key, std::move(plan)).first->second;
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
