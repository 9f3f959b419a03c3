#pragma once
// TMA tensor maps, for kernels that copy tiles with the tensor memory accelerator (cp.async.bulk.tensor) instead of
// per-thread copies: one layer's paged bf16 K or V cache, and a row-major bf16 matrix.
#include <cuda.h>

#include <cstdint>

namespace nanovllm::cuda {

// The cache [num_blocks * block_size slots, num_kv_heads, head_dim] seen as a 3-D tensor whose boxes are
// `box_keys` consecutive slots x 64 values of one KV head, landing in shared memory as rows of 128 bytes with the
// 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)). A kernel addresses it at slot coordinates it takes
// from the block table, so the extent is given as 2^30 slots, more than any cache holds. Throws EngineError when
// the driver cannot encode it.
CUtensorMap paged_cache_tensor_map(const void* cache, int num_kv_heads, int head_dim, int box_keys);

// A row-major bf16 matrix [rows, cols] (cols a multiple of 8, data 16-byte aligned) whose boxes are `box_rows` rows x
// 64 columns, landing as rows of 128 bytes with the 128-byte swizzle, as above. Elements past either extent land as
// zeros. Throws EngineError when the driver cannot encode it.
CUtensorMap matrix_tensor_map(const void* data, int64_t rows, int64_t cols, int box_rows);

}  // namespace nanovllm::cuda
