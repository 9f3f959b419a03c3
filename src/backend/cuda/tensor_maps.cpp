#include "backend/cuda/tensor_maps.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "common/error.h"

namespace nanovllm::cuda {
namespace {

// The driver's encoder, found once through the runtime (the engine does not link the driver library itself).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw EngineError(std::string("cuTensorMapEncodeTiled is not available from the driver: ") +
                        cudaGetErrorString(err));
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

constexpr cuuint32_t kBoxValues = 64;  // 128 bytes of bf16: the widest row the 128-byte swizzle takes

// A bf16 tensor map of kRank dimensions (innermost first) whose boxes land with the 128-byte swizzle, zeros past the
// extents; describe() names the tensor in the error.
template <int kRank, typename Describe>
CUtensorMap swizzled_bf16_map(const void* data, const cuuint64_t (&dims)[kRank], const cuuint64_t (&strides)[kRank - 1],
                              const cuuint32_t (&box)[kRank], const Describe& describe) {
  cuuint32_t element_strides[kRank];
  std::fill(std::begin(element_strides), std::end(element_strides), 1u);
  CUtensorMap map{};
  const CUresult r =
      tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, kRank, const_cast<void*>(data), dims, strides, box,
                           element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw EngineError("cuTensorMapEncodeTiled: error " + std::to_string(static_cast<int>(r)) + " for " + describe());
  return map;
}

}  // namespace

CUtensorMap paged_cache_tensor_map(const void* cache, int num_kv_heads, int head_dim, int box_keys) {
  constexpr cuuint64_t kSlotExtent = 1ull << 30;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(num_kv_heads), kSlotExtent};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_dim) * 2,  // bytes from one KV head to the next
                                 static_cast<cuuint64_t>(num_kv_heads) * head_dim * 2};  // from one slot to the next
  const cuuint32_t box[3] = {kBoxValues, 1, static_cast<cuuint32_t>(box_keys)};
  return swizzled_bf16_map(cache, dims, strides, box, [&] {
    return "a cache of " + std::to_string(num_kv_heads) + " KV heads of " + std::to_string(head_dim) + " values";
  });
}

CUtensorMap matrix_tensor_map(const void* data, int64_t rows, int64_t cols, int box_rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};  // bytes from one row to the next
  const cuuint32_t box[2] = {kBoxValues, static_cast<cuuint32_t>(box_rows)};
  return swizzled_bf16_map(data, dims, strides, box, [&] {
    return "a matrix of " + std::to_string(rows) + " x " + std::to_string(cols) + " values in boxes of " +
           std::to_string(box_rows) + " rows";
  });
}

}  // namespace nanovllm::cuda
