// Causal attention over the paged KV cache, one code path for prefill, chunked prefill, prefix hits and
// decode: query row i of a sequence with q_len rows and seq_len_k cached keys sits at position
// seq_len_k - q_len + i and attends to keys [0, position]. Softmax in fp32 with the maximum subtracted.
// One work item is (query row, KV head): it reads each of its keys and values once for all the query heads
// of that GQA group, which is what bounds decode.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vector_kernels.h"

namespace nanovllm {

namespace {

struct CacheGeometry {
  const float* k;
  const float* v;
  int64_t block_size;
  int64_t num_kv_heads;
  int64_t head_dim;
  // Start of key `offset` of block `block`, KV head `kv_head`, in K (or at the same place in V).
  int64_t index(int64_t block, int64_t offset, int64_t kv_head) const {
    return ((block * block_size + offset) * num_kv_heads + kv_head) * head_dim;
  }
};

// The `group` query heads in q (consecutive, head_dim apart) attend to keys [0, num_keys) of one KV head,
// found through `blocks`; results go to out (same layout as q). scratch: group * (num_keys + 1) floats.
NANOVLLM_CPU_MULTIVERSION
void attend_group(const float* q, const CacheGeometry& cache, const int32_t* blocks, int64_t kv_head,
                  int64_t num_keys, int64_t group, float scale, float* scratch, float* out) {
  const int64_t d = cache.head_dim, bs = cache.block_size;
  float* scores = scratch;                           // [group, num_keys]
  float* inverse_sums = scratch + group * num_keys;  // [group]
  // Scores, block by block: each key is loaded once and dotted with every head of the group.
  for (int64_t first = 0; first < num_keys; first += bs) {
    const int64_t block = blocks[first / bs];
    const int64_t count = std::min(bs, num_keys - first);
    for (int64_t j = 0; j < count; ++j) {
      const float* key = cache.k + cache.index(block, j, kv_head);
      for (int64_t g = 0; g < group; ++g) scores[g * num_keys + first + j] = cpu::dot(q + g * d, key, d) * scale;
    }
  }
  // Softmax weights, unnormalised; the sum is kept in double.
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores + g * num_keys;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < num_keys; ++j) max_score = std::max(max_score, s[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < num_keys; ++j) {
      s[j] = std::exp(s[j] - max_score);
      sum += s[j];
    }
    inverse_sums[g] = static_cast<float>(1.0 / sum);
  }
  // Weighted sum of values; q is not read past this point, so out may alias it.
  for (int64_t g = 0; g < group; ++g) std::fill(out + g * d, out + (g + 1) * d, 0.0f);
  for (int64_t first = 0; first < num_keys; first += bs) {
    const int64_t block = blocks[first / bs];
    const int64_t count = std::min(bs, num_keys - first);
    for (int64_t j = 0; j < count; ++j) {
      const float* value = cache.v + cache.index(block, j, kv_head);
      for (int64_t g = 0; g < group; ++g) cpu::axpy(scores[g * num_keys + first + j], value, out + g * d, d);
    }
  }
  for (int64_t g = 0; g < group; ++g) cpu::scale_in_place(inverse_sums[g], out + g * d, d);
}

}  // namespace

void CpuBackend::paged_attention(const Tensor& q, const KvCacheLayer& cache, const AttentionBatch& batch,
                                 int num_heads, int num_kv_heads, int head_dim, float scale, Tensor& out) {
  const char* op = "paged_attention";
  const int64_t nh = num_heads, nkv = num_kv_heads, d = head_dim;
  const int64_t bs = batch.block_size, num_seqs = batch.num_seqs, max_blocks = batch.max_blocks_per_seq;
  cpu::require(nh > 0 && nkv > 0 && d > 0 && nh % nkv == 0, op,
               "num_heads " + std::to_string(nh) + " must be a positive multiple of num_kv_heads " +
                   std::to_string(nkv));
  cpu::require(bs > 0 && num_seqs >= 0 && max_blocks >= 0, op, "batch has a non-positive block_size");
  cpu::require_dtype(q, DType::F32, op, "q");
  cpu::require_dtype(out, DType::F32, op, "out");
  cpu::require_dtype(cache.k, DType::F32, op, "cache.k");
  cpu::require_dtype(cache.v, DType::F32, op, "cache.v");
  const int64_t tokens = q.dim(0);
  cpu::require_matrix(q, tokens, nh * d, op, "q");
  cpu::require_matrix(out, tokens, nh * d, op, "out");
  const int64_t block_elems = bs * nkv * d;
  cpu::require(cache.k.numel() == cache.v.numel() && cache.k.numel() % block_elems == 0, op,
               "cache.k " + cache.k.shape_string() + " / cache.v " + cache.v.shape_string() +
                   " are not [num_blocks, " + std::to_string(bs) + ", " + std::to_string(nkv) + ", " +
                   std::to_string(d) + "]");
  const int64_t num_blocks = cache.k.numel() / block_elems;
  cpu::require_dtype(batch.cu_seqlens_q, DType::I32, op, "cu_seqlens_q");
  cpu::require_dtype(batch.seq_lens_k, DType::I32, op, "seq_lens_k");
  cpu::require_vector(batch.cu_seqlens_q, num_seqs + 1, op, "cu_seqlens_q");
  cpu::require_vector(batch.seq_lens_k, num_seqs, op, "seq_lens_k");
  if (num_seqs == 0) return;
  cpu::require_dtype(batch.block_tables, DType::I32, op, "block_tables");
  cpu::require_vector(batch.block_tables, num_seqs * max_blocks, op, "block_tables");

  const int32_t* cu = batch.cu_seqlens_q.as<const int32_t>();
  const int32_t* lens_k = batch.seq_lens_k.as<const int32_t>();
  const int32_t* tables = batch.block_tables.as<const int32_t>();
  cpu::require(cu[0] == 0 && cu[num_seqs] <= tokens, op,
               "cu_seqlens_q must run from 0 to at most " + std::to_string(tokens) + " rows");
  // Every row's sequence, and a check of every block a sequence will read.
  std::vector<int32_t> row_seq(static_cast<size_t>(cu[num_seqs]));
  int64_t longest = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t q_len = cu[s + 1] - cu[s], k_len = lens_k[s];
    const std::string seq = "sequence " + std::to_string(s);
    cpu::require(q_len >= 0 && k_len >= q_len, op,
                 seq + " has " + std::to_string(q_len) + " query rows but " + std::to_string(k_len) + " keys");
    const int64_t used_blocks = (k_len + bs - 1) / bs;
    cpu::require(used_blocks <= max_blocks, op,
                 seq + " needs " + std::to_string(used_blocks) + " blocks, the table has " +
                     std::to_string(max_blocks));
    for (int64_t b = 0; b < used_blocks; ++b) {
      const int32_t id = tables[s * max_blocks + b];
      cpu::require(id >= 0 && id < num_blocks, op,
                   seq + " block " + std::to_string(b) + " is " + std::to_string(id) + ", outside [0, " +
                       std::to_string(num_blocks) + ")");
    }
    for (int64_t r = cu[s]; r < cu[s + 1]; ++r) row_seq[static_cast<size_t>(r)] = static_cast<int32_t>(s);
    longest = std::max(longest, k_len);
  }

  const CacheGeometry geometry{cache.k.as<const float>(), cache.v.as<const float>(), bs, nkv, d};
  const int64_t group = nh / nkv;
  const int64_t rows = cu[num_seqs];
  const int64_t items = rows * nkv;
  const float* qs = q.as<const float>();
  float* os = out.as<float>();
#pragma omp parallel num_threads(num_threads_) if (items > 1)
  {
    std::vector<float> scratch(static_cast<size_t>(group * (longest + 1)));
    // Causal rows differ in length: hand out small chunks.
#pragma omp for schedule(dynamic, 4)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t row = item / nkv, kv_head = item % nkv;
      const int64_t s = row_seq[static_cast<size_t>(row)];
      const int64_t q_len = cu[s + 1] - cu[s];
      const int64_t position = lens_k[s] - q_len + (row - cu[s]);
      const int64_t head_offset = (row * nh + kv_head * group) * d;
      attend_group(qs + head_offset, geometry, tables + s * max_blocks, kv_head, position + 1, group, scale,
                   scratch.data(), os + head_offset);
    }
  }
}

}  // namespace nanovllm
