#include "backend/cuda/paged_cache_tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

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

}  // namespace

CUtensorMap paged_cache_tensor_map(const void* cache, int num_kv_heads, int head_dim, int box_keys) {
  constexpr cuuint32_t kBoxValues = 64;  // 128 bytes of bf16: the widest row the 128-byte swizzle takes
  constexpr cuuint64_t kSlotExtent = 1ull << 30;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(num_kv_heads), kSlotExtent};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_dim) * 2,  // bytes from one KV head to the next
                                 static_cast<cuuint64_t>(num_kv_heads) * head_dim * 2};  // from one slot to the next
  const cuuint32_t box[3] = {kBoxValues, 1, static_cast<cuuint32_t>(box_keys)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map{};
  const CUresult r =
      tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(cache), dims, strides, box,
                           element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw EngineError("cuTensorMapEncodeTiled: error " + std::to_string(static_cast<int>(r)) + " for a cache of " +
                      std::to_string(num_kv_heads) + " KV heads of " + std::to_string(head_dim) + " values");
  return map;
}

}  // namespace nanovllm::cuda
