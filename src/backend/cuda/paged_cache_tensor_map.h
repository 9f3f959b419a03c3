#pragma once
// A TMA tensor map over one layer's paged bf16 K or V cache, for kernels that copy whole cache blocks' keys with
// the tensor memory accelerator (cp.async.bulk.tensor) instead of per-thread copies.
#include <cuda.h>

namespace nanovllm::cuda {

// The cache [num_blocks * block_size slots, num_kv_heads, head_dim] seen as a 3-D tensor whose boxes are
// `box_keys` consecutive slots x 64 values of one KV head, landing in shared memory as rows of 128 bytes with the
// 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)). A kernel addresses it at slot coordinates it takes
// from the block table, so the extent is given as 2^30 slots, more than any cache holds. Throws EngineError when
// the driver cannot encode it.
CUtensorMap paged_cache_tensor_map(const void* cache, int num_kv_heads, int head_dim, int box_keys);

}  // namespace nanovllm::cuda
