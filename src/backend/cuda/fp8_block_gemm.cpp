#include "backend/cuda/fp8_block_gemm.h"

#include <algorithm>
#include <bit>

#include "backend/cuda/cuda_check.h"

namespace nanovllm::cuda {
namespace {

int bucket_of(int m) { return m <= 1 ? 1 : static_cast<int>(std::bit_ceil(static_cast<unsigned>(m))); }

// The largest power of two (at most 16) dividing both the address and the row pitch of `bytes_per_row`.
int alignment_of(const void* p, size_t bytes_per_row) {
  const size_t bits = reinterpret_cast<uintptr_t>(p) | bytes_per_row | 16u;
  return static_cast<int>(bits & (~bits + 1u));
}

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  NANOVLLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

}  // namespace

Fp8BlockGemm::Fp8BlockGemm(void* workspace, size_t workspace_bytes)
    : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  NANOVLLM_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Fp8BlockGemm::~Fp8BlockGemm() {
  for (auto& [key, plan] : plans_) destroy(plan);
  cublasLtDestroy(handle_);
}

void Fp8BlockGemm::destroy(Plan& plan) {
  if (plan.desc) cublasLtMatmulDescDestroy(plan.desc);
  if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.d) cublasLtMatrixLayoutDestroy(plan.d);
  plan = Plan{};
}

Fp8BlockGemm::ShapeKey Fp8BlockGemm::key_of(const Fp8BlockGemmArgs& args) {
  return ShapeKey{args.m, args.n, args.k, args.bias != nullptr,
                  alignment_of(args.out, static_cast<size_t>(args.n) * sizeof(__nv_bfloat16))};
}

Fp8BlockGemm::Plan Fp8BlockGemm::create_plan(const ShapeKey& key) {
  Plan plan;
  try {
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
    NANOVLLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_16BF, key.n, key.m, key.n));
  } catch (...) {
    destroy(plan);
    throw;
  }
  return plan;
}

bool Fp8BlockGemm::heuristic(const Plan& plan, const ShapeKey& key, cublasLtMatmulAlgo_t& algo) {
  if (!plan.modes_set) return false;
  cublasLtMatmulPreference_t preference = nullptr;
  NANOVLLM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = [&] {
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &workspace_bytes_, sizeof(workspace_bytes_));
    const uint32_t ab_alignment = 16, cd_alignment = static_cast<uint32_t>(key.out_alignment);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES}) {
      if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(preference, attr, &ab_alignment, sizeof(ab_alignment));
    }
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(preference, attr, &cd_alignment, sizeof(cd_alignment));
    }
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d, preference, 1, &result,
                                         &found);
    }
    return s;
  }();
  cublasLtMatmulPreferenceDestroy(preference);
  // An unsupported combination (an older cuBLASLt, a GPU other than Hopper) is a refusal, not an error.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) return false;
  NANOVLLM_CUBLAS_CHECK(status);
  if (found == 0) return false;
  algo = result.algo;
  return true;
}

Fp8BlockGemm::Plan& Fp8BlockGemm::plan_for(const ShapeKey& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan plan = create_plan(key);
  try {
    ShapeKey bucket = key;
    bucket.m = bucket_of(key.m);
    auto listed = algo_by_bucket_.find(bucket);
    if (listed == algo_by_bucket_.end()) {
      Plan bucket_plan = bucket.m == key.m ? Plan{} : create_plan(bucket);
      cublasLtMatmulAlgo_t algo{};
      bool found = false;
      try {
        found = heuristic(bucket.m == key.m ? plan : bucket_plan, bucket, algo);
      } catch (...) {
        destroy(bucket_plan);
        throw;
      }
      destroy(bucket_plan);
      listed = algo_by_bucket_.emplace(bucket, found ? std::optional(algo) : std::nullopt).first;
    }
    if (listed->second) {
      plan.algo = *listed->second;
      plan.supported = true;
    } else {
      plan.supported = heuristic(plan, key, plan.algo);  // the bucket's shape had none; this one may
    }
  } catch (...) {
    destroy(plan);
    throw;
  }
  return plans_.emplace(key, plan).first->second;
}

bool Fp8BlockGemm::supports(const Fp8BlockGemmArgs& args) {
  if (args.m <= 0 || args.n <= 0 || args.k <= 0 || args.k % 16 != 0) return false;
  return plan_for(key_of(args)).supported;
}

bool Fp8BlockGemm::run(const Fp8BlockGemmArgs& args, cudaStream_t stream) {
  if (!supports(args)) return false;
  const ShapeKey key = key_of(args);
  Plan& plan = plan_for(key);
  // The attributes' values are the device pointers themselves, so their size is that of a pointer.
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(args.w_scales));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(args.x_scales));
  if (args.bias != nullptr) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(args.bias));
  const float alpha = 1.0f, beta = 0.0f;
  auto matmul = [&] {
    return cublasLtMatmul(handle_, plan.desc, &alpha, args.w_codes, plan.a, args.x_codes, plan.b, &beta, args.out,
                          plan.d, args.out, plan.d, &plan.algo, workspace_, workspace_bytes_, stream);
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
