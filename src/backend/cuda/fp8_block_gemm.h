#pragma once
// out [M, N] bf16 = x [M, K] · W [N, K]^T (+ bias [N]) over FP8 E4M3 operands with block scales, on cuBLASLt's
// block-scaled FP8 GEMM (cuBLASLt 12.9+, Hopper): W as Qwen's checkpoints store it (one fp32 scale per 128 x 128
// block) and x quantised per token and 128-wide K group (launch_quantize_fp8_activations). Accumulation is fp32;
// cuBLASLt applies the scales to each 128-deep partial product.
//
// Operands. Row-major out is column-major D (N x M) = op(A) · op(B) with A = W (stored K-contiguous, OP_T: the
// "TN" arrangement FP8 needs on Hopper) and B = x (K-contiguous, OP_N); m = N, n = M, k = K. A's scales are
// BLK128x128_32F, B's VEC128_32F (cuBLASLt accepts 1D x 1D, 1D x 2D and 2D x 1D pairings on Hopper, not 2D x 2D).
//
// Scale layouts, both relative to an operand's contiguous ("inner") dimension K and its other ("outer") one:
//   VEC128_32F     one scale per (outer index, 128-wide inner group): ceil(K / 128) x outer floats, outer index
//                  contiguous, no padding: x's scale of token t, group g at [g * M + t].
//   BLK128x128_32F one scale per 128 x 128 block: ceil(outer / 128) rows of ceil(K / 128) inner-block scales,
//                  the inner blocks contiguous and each row padded to a multiple of 4: W's scale of block (i, j)
//                  at [i * round_up(ceil(K / 128), 4) + j]. Qwen's [ceil(N / 128), ceil(K / 128)] row-major
//                  scales are this layout as stored whenever ceil(K / 128) % 4 == 0 (every Qwen3 projection);
//                  otherwise a padded copy is made once at load (CudaBackend::prepare_fp8_linear).
// Where the layouts come from: the scale-tensor sizes of NVIDIA's public cuBLASLt samples, PyTorch's _scaled_mm
// checks of the same modes and the cuBLAS guide's "scaling factors layouts" section; an H200 (cuBLASLt 13.1)
// confirmed them: the GPU tests (tests/cuda/ops/test_fp8_block_gemm.cpp: odd M, K ending inside a group,
// ceil(K / 128) not a multiple of 4) match the CPU's W8A8 math, and a probe of every mode pairing found the three
// above and no 2D x 2D kernel. The same probe found that cuBLASLt lists no kernel while the scale pointers are
// unset (the plan sets placeholders) and none for M not a multiple of 4 (the caller takes the rest elsewhere).
//
// Alignment: codes 16-byte aligned with K % 16 == 0, scales 16-byte aligned, out as cuBLASLt's heuristic accepts
// (the preference names the alignment out actually has). As in Gemm, the algorithm is chosen once per shape
// bucket (M rounded up to a power of two) and descriptors are cached per exact shape; no allocation per call,
// so calls may be graph-captured.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "backend/cuda/cublaslt_plan.h"
#include "common/fp8.h"

namespace nanovllm::cuda {

// Floats between two rows of scale blocks in BLK128x128_32F's layout, for a K of k.
constexpr int64_t fp8_weight_scale_row_stride(int64_t k) { return (fp8_blocks(k) + 3) / 4 * 4; }

struct Fp8BlockGemmArgs {
  const uint8_t* x_codes = nullptr;     // [m, k] E4M3
  const float* x_scales = nullptr;      // [ceil(k / 128), m], VEC128_32F
  const uint8_t* w_codes = nullptr;     // [n, k] E4M3
  const float* w_scales = nullptr;      // [ceil(n / 128), fp8_weight_scale_row_stride(k)], BLK128x128_32F
  const __nv_bfloat16* bias = nullptr;  // [n] or null
  __nv_bfloat16* out = nullptr;         // [m, n]
  int m = 0, n = 0, k = 0;
};

class Fp8BlockGemm {
 public:
  // workspace: device memory of workspace_bytes owned by the caller, alive as long as this object.
  Fp8BlockGemm(void* workspace, size_t workspace_bytes);
  ~Fp8BlockGemm();
  Fp8BlockGemm(const Fp8BlockGemm&) = delete;
  Fp8BlockGemm& operator=(const Fp8BlockGemm&) = delete;

  // Whether cuBLASLt has an algorithm for this shape with these pointers' alignment (answered once per shape,
  // then cached). No GPU work.
  bool supports(const Fp8BlockGemmArgs& args);
  // Enqueues the GEMM; false when cuBLASLt refuses it (then nothing was enqueued). Call supports() first.
  bool run(const Fp8BlockGemmArgs& args, cudaStream_t stream);

 private:
  struct ShapeKey {
    int m, n, k;
    bool bias;
    int out_alignment;
    bool operator<(const ShapeKey& o) const {
      return std::tie(m, n, k, bias, out_alignment) < std::tie(o.m, o.n, o.k, o.bias, o.out_alignment);
    }
  };
  struct Plan : CublasLtPlan {
    bool modes_set = false;  // cuBLASLt took the scale modes
    bool supported = false;
  };

  static ShapeKey key_of(const Fp8BlockGemmArgs& args);
  Plan& plan_for(const ShapeKey& key);
  Plan create_plan(const ShapeKey& key);
  // The heuristic's first algorithm for the plan's shape; false when it lists none.
  bool heuristic(const Plan& plan, const ShapeKey& key, cublasLtMatmulAlgo_t& algo);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<ShapeKey, std::optional<cublasLtMatmulAlgo_t>> algo_by_bucket_;  // nullopt: the heuristic had none
  std::map<ShapeKey, Plan> plans_;
};

}  // namespace nanovllm::cuda
