#pragma once
// out [M, N] = x [M, K] · W [N, K]^T (+ bias [N]) through cuBLASLt: bf16 operands, fp32 accumulation, bf16 or
// fp32 output. Row-major out is column-major out^T = W^T(col-major view of W) · x^T, so cuBLASLt sees
// A = W (transposed), B = x, m = N, n = M, k = K. The algorithm is chosen by cublasLtMatmulAlgoGetHeuristic
// once per shape bucket (M rounded up to a power of two) and cached; descriptors are cached per exact shape.
// Skinny calls (M <= kGemvMaxTokens, gemv.h) go to the weight-streaming GEMV instead (docs/kernels/gemv.md),
// unless measure_small_row_paths found cuBLASLt faster for that shape; on sm_90, the rest up to
// skinny_gemm_route_max_tokens rows with bf16 out to the skinny GEMM (gemm_skinny.h).
// No allocation happens per call (the workspace is allocated once), so calls may be graph-captured.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/cuda/cublaslt_plan.h"
#include "backend/cuda/gemm_skinny.h"
#include "backend/cuda/gemv.h"
#include "common/dtype.h"

namespace nanovllm::cuda {

class Gemm {
 public:
  // workspace: device memory of workspace_bytes owned by the caller, alive as long as this object.
  Gemm(void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // bias may be null. out_dtype is BF16 or F32. Pointers must be 16-byte aligned and K, N multiples of 8.
  // Small M goes to the GEMV (unless measured slower), the rest to cuBLASLt.
  void run(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, void* out, DType out_dtype,
           int m, int n, int k, cudaStream_t stream);
  // Times the GEMV against cuBLASLt on this weight (no bias, out_dtype out) at 1, 2, 4, 8 and 16 rows; run() then
  // takes cuBLASLt for this shape at the row counts (rounded up to those) where it was faster by more than
  // kCublasMargin. For the few weights whose faster path differs by GPU (the lm_head: the GEMV won on an H100,
  // cuBLASLt on an H200). x_scratch: [16, k] bf16, out_scratch: [16, n] of out_dtype, both only written to or
  // read for timing. Synchronises the stream; must not be called while it captures.
  void measure_small_row_paths(const __nv_bfloat16* weight, DType out_dtype, int n, int k,
                               const __nv_bfloat16* x_scratch, void* out_scratch, cudaStream_t stream);
  static constexpr double kCublasMargin = 0.05;
  // Whether run() sends m rows of this shape to cuBLASLt though the GEMV could take them (measured above).
  bool measured_cublas_faster(int m, int n, int k, DType out_dtype, bool bias) const;

  // Always cuBLASLt (the benchmark compares the two paths).
  void run_cublaslt(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias, void* out,
                    DType out_dtype, int m, int n, int k, cudaStream_t stream);

  // A decode-sized call (its fused SiLU and folded norms included) on the GEMV where it takes the arguments, else on
  // the skinny GEMM where skinny_takes() them (first on the skinny GEMM where skinny_gemm_preferred_over_gemv);
  // false, with nothing enqueued, where neither does.
  bool run_gemv_or_skinny(const GemvArgs& args, cudaStream_t stream);
  // Whether run() sends this bf16-out call to the skinny GEMM when the GEMV does not take it: 17 to
  // skinny_gemm_route_max_tokens rows (and no more than NANOVLLM_SKINNY_GEMM's), on sm_90.
  bool skinny_takes(const SkinnyGemmArgs& args) const;
  // The most rows skinny_takes() takes for a weight of this many elements (the fused SiLU's 2n x k) on this device:
  // 0 off sm_90.
  int skinny_max_tokens(int64_t weight_elements) const;
  SkinnyGemmWorkspace skinny_workspace() const;

  // For benchmarks: the algorithms cuBLASLt's heuristic lists for this shape (no bias), best guess first, at
  // most max_count; run_cublaslt uses the first one listed for M's bucket. run_listed runs one of them and
  // returns false when cuBLASLt refuses it.
  std::vector<cublasLtMatmulAlgo_t> listed_algorithms(int m, int n, int k, DType out_dtype, int max_count);
  bool run_listed(const cublasLtMatmulAlgo_t& algo, const __nv_bfloat16* x, const __nv_bfloat16* weight, void* out,
                  DType out_dtype, int m, int n, int k, cudaStream_t stream);

 private:
  struct ShapeKey {
    int m, n, k;
    DType out;
    bool bias;
    bool operator<(const ShapeKey& o) const {
      return std::tie(m, n, k, out, bias) < std::tie(o.m, o.n, o.k, o.out, o.bias);
    }
  };
  using Plan = CublasLtPlan;

  Plan create_plan(const ShapeKey& key);
  // The exact shape's cached plan, created (with its bucket's algorithm) on first use.
  Plan& plan_for(const ShapeKey& key);
  // Up to max_count algorithms for the plan's shape, the heuristic's order; throws when there is none.
  std::vector<cublasLtMatmulAlgo_t> heuristic(const Plan& plan, const ShapeKey& key, int max_count);
  // The rows routed to the skinny GEMM for a weight of this many elements, whatever the device.
  int skinny_routed_rows(int64_t weight_elements) const;
  cublasLtMatmulAlgo_t choose_algo(const Plan& plan_of_bucket, const ShapeKey& bucket) {
    return heuristic(plan_of_bucket, bucket, 1).front();
  }

  struct DeviceFree {
    void operator()(unsigned* p) const;
  };

  cublasLtHandle_t handle_ = nullptr;
  int sm_count_ = 1;  // of the current device at construction; sizes the GEMV's grid
  void* workspace_;
  size_t workspace_bytes_;
  // The skinny GEMM's arrival counters, one a 64-row tile (its partials use workspace_).
  std::unique_ptr<unsigned, DeviceFree> skinny_counters_;
  int skinny_max_rows_ = kSkinnyGemmMaxTokens;  // or NANOVLLM_SKINNY_GEMM's, a cap for A/B runs
  std::map<ShapeKey, cublasLtMatmulAlgo_t> algo_by_bucket_;
  std::map<ShapeKey, Plan> plans_;
  // Per (n, k, out dtype) measured: cuBLASLt faster at 1, 2, 4, 8, 16 rows.
  std::map<std::tuple<int, int, DType>, std::array<bool, 5>> cublas_at_small_rows_;
};

}  // namespace nanovllm::cuda
