#include "backend/cuda/fp8_block_gemm.h"

#include <optional>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace nanovllm::cuda {
namespace {

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  NANOVLLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

// What the plans cannot take at all: an empty shape, K not a multiple of 16 (the codes' alignment).
bool shape_allowed(const Fp8BlockGemmArgs& args) { return args.m > 0 && args.n > 0 && args.k > 0 && args.k % 16 == 0; }

}  // namespace

Fp8BlockGemm::Fp8BlockGemm(void* workspace, size_t workspace_bytes)
    : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  NANOVLLM_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Fp8BlockGemm::~Fp8BlockGemm() {
  plans_.clear();  // the descriptors before the handle
  cublasLtDestroy(handle_);
}

Fp8BlockGemm::ShapeKey Fp8BlockGemm::key_of(const Fp8BlockGemmArgs& args) {
  return ShapeKey{args.m, args.n, args.k, args.bias != nullptr,
                  static_cast<int>(output_alignment(reinterpret_cast<uintptr_t>(args.out),
                                                    static_cast<size_t>(args.n) * sizeof(__nv_bfloat16)))};
}

Fp8BlockGemm::Plan Fp8BlockGemm::create_plan(const ShapeKey& key) {
  Plan plan;  // its descriptors are released if a call below throws
  NANOVLLM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  // The modes are set before the heuristic is asked: they select the kernels it lists. A cuBLASLt that does
  // not know them refuses the attributes: the plan is then unsupported, not an error.
  const cublasLtMatmulMatrixScale_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                    b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  plan.modes_set = cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                                  sizeof(a_mode)) == CUBLAS_STATUS_SUCCESS &&
                   cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                                  sizeof(b_mode)) == CUBLAS_STATUS_SUCCESS;
  // cuBLASLt lists no block-scaled kernel while the scale pointers are unset (measured: the heuristic finds
  // none), so the plan carries a placeholder until run() sets the call's own; the workspace is aligned as
  // the real scales are.
  if (plan.modes_set) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(workspace_));
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(workspace_));
  }
  if (key.bias) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
  }
  // A = W as column-major [K, N] (op T), B = x as column-major [K, M], C = D = out as column-major [N, M].
  NANOVLLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_8F_E4M3, key.k, key.n, key.k));
  NANOVLLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_8F_E4M3, key.k, key.m, key.k));
  NANOVLLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_16BF, key.n, key.m, key.n));
  return plan;
}

bool Fp8BlockGemm::heuristic(const Plan& plan, const ShapeKey& key, cublasLtMatmulAlgo_t& algo) {
  if (!plan.modes_set) return false;
  std::vector<cublasLtMatmulAlgo_t> algos;
  const cublasStatus_t status =
      list_algorithms(handle_, plan, workspace_bytes_, static_cast<uint32_t>(key.out_alignment), 1, algos);
  // An unsupported combination (an older cuBLASLt, a GPU other than Hopper) is a refusal, not an error.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) return false;
  NANOVLLM_CUBLAS_CHECK(status);
  if (algos.empty()) return false;
  algo = algos.front();
  return true;
}

Fp8BlockGemm::Plan& Fp8BlockGemm::plan_for(const ShapeKey& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan plan = create_plan(key);
  ShapeKey bucket = key;
  bucket.m = gemm_row_bucket(key.m);
  auto listed = algo_by_bucket_.find(bucket);
  if (listed == algo_by_bucket_.end()) {
    cublasLtMatmulAlgo_t algo{};
    const bool found = bucket.m == key.m ? heuristic(plan, bucket, algo) : heuristic(create_plan(bucket), bucket, algo);
    listed = algo_by_bucket_.emplace(bucket, found ? std::optional(algo) : std::nullopt).first;
  }
  if (listed->second) {
    plan.algo = *listed->second;
    plan.supported = true;
  } else {
    plan.supported = heuristic(plan, key, plan.algo);  // the bucket's shape had none; this one may
  }
  return plans_.emplace(key, std::move(plan)).first->second;
}

bool Fp8BlockGemm::supports(const Fp8BlockGemmArgs& args) {
  return shape_allowed(args) && plan_for(key_of(args)).supported;
}

bool Fp8BlockGemm::run(const Fp8BlockGemmArgs& args, cudaStream_t stream) {
  if (!shape_allowed(args)) return false;
  const ShapeKey key = key_of(args);
  Plan& plan = plan_for(key);
  if (!plan.supported) return false;
  // The attributes' values are the device pointers themselves, so their size is that of a pointer.
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(args.w_scales));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(args.x_scales));
  if (args.bias != nullptr) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(args.bias));
  const float alpha = 1.0f, beta = 0.0f;
  auto matmul = [&] {
    return cublasLtMatmul(handle_, plan.desc, &alpha, args.w_codes, plan.a, args.x_codes, plan.b, &beta, args.out,
                          plan.c, args.out, plan.c, &plan.algo, workspace_, workspace_bytes_, stream);
  };
  cublasStatus_t status = matmul();
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    // The bucket's algorithm does not fit this exact M: ask for one that does and keep it for this shape.
    plan.supported = heuristic(plan, key, plan.algo);
    if (!plan.supported) return false;
    status = matmul();
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
      plan.supported = false;
      return false;
    }
  }
  NANOVLLM_CUBLAS_CHECK(status);
  return true;
}

}  // namespace nanovllm::cuda
