// Causal attention over the paged KV cache, one code path for prefill, chunked prefill, prefix hits and
// decode: query row i of a sequence with q_len rows and seq_len_k cached keys sits at position
// seq_len_k - q_len + i and attends to keys [0, position]. Softmax in fp32 with the maximum subtracted.
// One work item is a tile of query rows of one sequence times some KV heads: it reads each of its keys and
// values once for all its queries (rows, and the query heads of each GQA group), which is what bounds decode.
// An FP8 cache is dequantised a block at a time into a per-thread staging copy and attended as F32.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vector_kernels.h"
#include "common/fp8.h"

namespace nanovllm {

namespace {

// Query rows of one sequence that share each key load (prefill); decode rows are tiles of one.
constexpr int64_t kRowsPerTile = 8;
// Keys (or values) of one head a tile works through at a time, sized to stay in L1.
constexpr int64_t kKeysPerChunk = 8;

struct CacheGeometry {
  const void* k;
  const void* v;
  bool fp8;  // F8_E4M3 codes times k_scale / v_scale; else F32
  float k_scale;
  float v_scale;
  int64_t block_size;
  int64_t num_kv_heads;
  int64_t head_dim;
  // Start of key `offset` of block `block`, KV head `kv_head`, in K (or at the same place in V).
  int64_t index(int64_t block, int64_t offset, int64_t kv_head) const {
    return ((block * block_size + offset) * num_kv_heads + kv_head) * head_dim;
  }
  // F32 values of the first `keys` keys of cache block `block`, KV heads [first_head, first_head + heads), at
  // their cache strides, pointing at first_head: the cache itself, or (FP8) `staging` of block_size x
  // num_kv_heads x head_dim floats holding those values dequantised (code x scale in fp32).
  const float* block_values(bool keys_side, int64_t block, int64_t keys, int64_t first_head, int64_t heads,
                            float* staging) const {
    const int64_t start = index(block, 0, first_head);
    if (!fp8) return static_cast<const float*>(keys_side ? k : v) + start;
    const uint8_t* codes = static_cast<const uint8_t*>(keys_side ? k : v) + start;
    const float scale = keys_side ? k_scale : v_scale;
    const std::array<float, 256>& value_of = fp8_e4m3_values();
    const int64_t stride = num_kv_heads * head_dim, width = heads * head_dim;
    for (int64_t j = 0; j < keys; ++j)
      for (int64_t e = 0; e < width; ++e) staging[j * stride + e] = value_of[codes[j * stride + e]] * scale;
    return staging;
  }
};

// A tile of work: `rows` consecutive query rows of one sequence times `kv_heads` consecutive KV heads times
// the `group` query heads that share each. Row r attends to keys [0, first_num_keys + r). Keys and values are
// read once per tile and used by all its queries; several KV heads per tile make those reads contiguous
// (the heads of one key are adjacent in the cache).
struct QueryTile {
  const float* q;  // first query head of the tile's first KV head, in its first row
  float* out;      // same layout as q
  int64_t row_stride;
  int64_t rows;
  int64_t first_kv_head;
  int64_t kv_heads;
  int64_t group;
  int64_t first_num_keys;
};

// scratch: kv_heads * rows * group * (first_num_keys + rows) floats; staging (FP8 caches only): block_size x
// num_kv_heads x head_dim floats.
NANOVLLM_CPU_MULTIVERSION
void attend_tile(const QueryTile& tile, const CacheGeometry& cache, const int32_t* blocks, float scale, float* scratch,
                 float* staging) {
  const int64_t d = cache.head_dim, bs = cache.block_size, group = tile.group, rows = tile.rows;
  const int64_t max_keys = tile.first_num_keys + rows - 1;
  const int64_t key_stride = cache.num_kv_heads * d;  // from one key (or value) of a head to the next
  const int64_t queries = tile.kv_heads * rows * group;
  // Query i = (h * rows + r) * group + g: KV head h of the tile, row r, head g of the group.
  const auto row_of = [&](int64_t i) { return (i / group) % rows; };
  const auto head_of = [&](int64_t i) { return i / (group * rows); };
  const auto column_of = [&](int64_t i) { return (head_of(i) * group + i % group) * d; };
  const auto num_keys = [&](int64_t i) { return tile.first_num_keys + row_of(i); };
  const auto query = [&](int64_t i) { return tile.q + row_of(i) * tile.row_stride + column_of(i); };
  const auto output = [&](int64_t i) { return tile.out + row_of(i) * tile.row_stride + column_of(i); };
  const auto scores_of = [&](int64_t i) { return scratch + i * max_keys; };

  // Scores, kKeysPerChunk keys at a time: the chunk stays in L1 while every query of the tile uses it.
  for (int64_t first = 0; first < max_keys; first += bs) {
    const float* block_keys = cache.block_values(true, blocks[first / bs], std::min(bs, max_keys - first),
                                                 tile.first_kv_head, tile.kv_heads, staging);
    for (int64_t c = 0; c < bs && first + c < max_keys; c += kKeysPerChunk) {
      for (int64_t i = 0; i < queries; ++i) {
        const int64_t count = std::min(kKeysPerChunk, num_keys(i) - first - c);
        const float* keys = block_keys + head_of(i) * d;
        const float* qv = query(i);
        float* s = scores_of(i) + first;
        int64_t j = c;
        for (; j + 4 <= c + count; j += 4)
          cpu::dot4(qv, keys + j * key_stride, keys + (j + 1) * key_stride, keys + (j + 2) * key_stride,
                    keys + (j + 3) * key_stride, d, s + j);
        for (; j < c + count; ++j) s[j] = cpu::dot(qv, keys + j * key_stride, d);
        for (j = c; j < c + count; ++j) s[j] *= scale;
      }
    }
  }
  // Softmax weights, unnormalised (the maximum subtracted); the sum is kept in double.
  float* inverse_sums = scratch + queries * max_keys;  // [queries]
  for (int64_t i = 0; i < queries; ++i) {
    float* s = scores_of(i);
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < num_keys(i); ++j) max_score = std::max(max_score, s[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < num_keys(i); ++j) {
      s[j] = std::exp(s[j] - max_score);
      sum += s[j];
    }
    inverse_sums[i] = static_cast<float>(1.0 / sum);
  }
  // Weighted sum of values, the same chunks; no query is read past this point, so out may alias q.
  for (int64_t i = 0; i < queries; ++i) std::fill(output(i), output(i) + d, 0.0f);
  for (int64_t first = 0; first < max_keys; first += bs) {
    const float* block_values = cache.block_values(false, blocks[first / bs], std::min(bs, max_keys - first),
                                                   tile.first_kv_head, tile.kv_heads, staging);
    for (int64_t c = 0; c < bs && first + c < max_keys; c += kKeysPerChunk) {
      for (int64_t i = 0; i < queries; ++i) {
        const int64_t count = std::min(kKeysPerChunk, num_keys(i) - first - c);
        if (count <= 0) continue;
        cpu::weighted_rows_add(scores_of(i) + first + c, block_values + head_of(i) * d + c * key_stride, key_stride,
                               count, output(i), d);
      }
    }
  }
  for (int64_t i = 0; i < queries; ++i) cpu::scale_in_place(inverse_sums[i], output(i), d);
}

}  // namespace

void CpuBackend::paged_attention(const Tensor& q, const KvCacheLayer& cache, const AttentionBatch& batch, int num_heads,
                                 int num_kv_heads, int head_dim, float scale, Tensor& out) {
  const char* op = "paged_attention";
  const int64_t nh = num_heads, nkv = num_kv_heads, d = head_dim;
  const int64_t bs = batch.block_size, num_seqs = batch.num_seqs, max_blocks = batch.max_blocks_per_seq;
  cpu::require(
      nh > 0 && nkv > 0 && d > 0 && nh % nkv == 0, op,
      "num_heads " + std::to_string(nh) + " must be a positive multiple of num_kv_heads " + std::to_string(nkv));
  cpu::require(bs > 0 && num_seqs >= 0 && max_blocks >= 0, op, "batch has a non-positive block_size");
  cpu::require_dtype(q, DType::F32, op, "q");
  cpu::require_dtype(out, DType::F32, op, "out");
  cpu::require_kv_cache(cache, op);
  const int64_t tokens = q.dim(0);
  cpu::require_matrix(q, tokens, nh * d, op, "q");
  cpu::require_matrix(out, tokens, nh * d, op, "out");
  const int64_t block_elems = bs * nkv * d;
  cpu::require(cache.k.numel() == cache.v.numel() && cache.k.numel() % block_elems == 0, op,
               "cache.k " + cache.k.shape_string() + " / cache.v " + cache.v.shape_string() + " are not [num_blocks, " +
                   std::to_string(bs) + ", " + std::to_string(nkv) + ", " + std::to_string(d) + "]");
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
  // Check every block a sequence will read, and cut its query rows into tiles.
  struct RowTile {
    int32_t seq;
    int32_t first_row;
    int32_t rows;
  };
  std::vector<RowTile> tiles;
  int64_t scratch_floats = 0;
  const int64_t group = nh / nkv;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t q_len = cu[s + 1] - cu[s], k_len = lens_k[s];
    const std::string seq = "sequence " + std::to_string(s);
    cpu::require(q_len >= 0 && k_len >= q_len, op,
                 seq + " has " + std::to_string(q_len) + " query rows but " + std::to_string(k_len) + " keys");
    const int64_t used_blocks = (k_len + bs - 1) / bs;
    cpu::require(
        used_blocks <= max_blocks, op,
        seq + " needs " + std::to_string(used_blocks) + " blocks, the table has " + std::to_string(max_blocks));
    for (int64_t b = 0; b < used_blocks; ++b) {
      const int32_t id = tables[s * max_blocks + b];
      cpu::require(id >= 0 && id < num_blocks, op,
                   seq + " block " + std::to_string(b) + " is " + std::to_string(id) + ", outside [0, " +
                       std::to_string(num_blocks) + ")");
    }
    for (int64_t first = 0; first < q_len; first += kRowsPerTile) {
      const int64_t rows = std::min(kRowsPerTile, q_len - first);
      tiles.push_back({static_cast<int32_t>(s), static_cast<int32_t>(cu[s] + first), static_cast<int32_t>(rows)});
      scratch_floats = std::max(scratch_floats, rows * group * (k_len - q_len + first + rows + 1));
    }
  }

  // KV heads per work item: all of them (contiguous reads) unless that leaves too few items to share out or
  // makes a thread's scores scratch large (long contexts).
  constexpr int64_t kMaxScratchFloats = int64_t{1} << 21;  // 8 MiB
  const int64_t num_tiles = static_cast<int64_t>(tiles.size());
  int64_t heads_per_item = nkv;
  while (heads_per_item % 2 == 0 && (num_tiles * (nkv / heads_per_item) < 2 * static_cast<int64_t>(num_threads_) ||
                                     scratch_floats * heads_per_item > kMaxScratchFloats))
    heads_per_item /= 2;
  scratch_floats *= heads_per_item;

  const CacheGeometry geometry{cache.k.data, cache.v.data, cache.is_fp8(), cache.k_scale, cache.v_scale, bs, nkv, d};
  const int64_t head_groups = nkv / heads_per_item;
  const int64_t items = static_cast<int64_t>(tiles.size()) * head_groups;
  const float* qs = q.as<const float>();
  float* os = out.as<float>();
#pragma omp parallel num_threads(num_threads_) if (items > 1)
  {
    // Every score is written before it is read: no need to zero the scratch.
    const auto scratch = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(scratch_floats));
    const auto staging = std::make_unique_for_overwrite<float[]>(cache.is_fp8() ? static_cast<size_t>(block_elems) : 0);
    // Causal tiles differ in length: hand out small chunks.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const RowTile& t = tiles[static_cast<size_t>(item / head_groups)];
      const int64_t first_kv_head = (item % head_groups) * heads_per_item;
      const int64_t q_len = cu[t.seq + 1] - cu[t.seq];
      // Row i of a sequence sits at position seq_len_k - q_len + i and sees keys [0, position].
      const int64_t first_num_keys = lens_k[t.seq] - q_len + (t.first_row - cu[t.seq]) + 1;
      const int64_t offset = (static_cast<int64_t>(t.first_row) * nh + first_kv_head * group) * d;
      const QueryTile tile{qs + offset,   os + offset,    nh * d, t.rows,
                           first_kv_head, heads_per_item, group,  first_num_keys};
      attend_tile(tile, geometry, tables + t.seq * max_blocks, scale, scratch.get(), staging.get());
    }
  }
}

}  // namespace nanovllm
