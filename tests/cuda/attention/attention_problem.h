#pragma once
// Host side of the attention tests: a random paged batch (shuffled, non-contiguous block tables; every cache
// slot no sequence owns holds NaN, so a stray read poisons the result), its upload, and an fp64 reference.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/attention.h"

namespace nanovllm::attention_test {

struct SeqSpec {
  int q_len = 1;    // query rows of this step (0: a padding sequence with no row)
  int seq_len = 1;  // keys in the cache after this step
};

struct Problem {
  int num_heads = 2;
  int num_kv_heads = 1;
  int head_dim = 128;
  int block_size = 16;
  std::vector<SeqSpec> seqs;
  int extra_bound_q = 0;  // added to the max_seqlen_q / max_seqlen_k bounds (a graph captured for more)
  int extra_bound_k = 0;
  uint64_t seed = 1;
  bool fp8 = false;  // an FP8 cache of codes of value / scale
  float k_scale = 0.0173f;
  float v_scale = 0.0091f;

  std::string describe() const;
};

struct HostBatch {
  std::vector<uint16_t> q;                 // bf16 [T, nh * d]
  std::vector<uint16_t> k_cache, v_cache;  // bf16 [num_blocks, block_size, nkv, d]
  std::vector<uint8_t> k_codes, v_codes;   // instead, for an FP8 problem: E4M3 codes of the same shape
  std::vector<int> cu_seqlens_q, seq_lens_k, block_tables;
  int num_blocks = 0;
  int total_q = 0;
  int max_seqlen_q = 0;  // bounds as passed to the kernel (extra included)
  int max_seqlen_k = 0;
  int max_blocks_per_seq = 0;
  float scale = 0.f;
};

HostBatch make_batch(const Problem& p);

// fp64 attention of the same bf16 values (or FP8 codes times their scales): [T, nh * d].
std::vector<double> reference_attention(const Problem& p, const HostBatch& b);

struct DeviceFree {
  void operator()(void* ptr) const { cudaFree(ptr); }
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;
DevicePtr device_alloc(size_t bytes);
void check(cudaError_t err, const char* what);

// The batch on the device plus a NaN-poisoned output with one guard row after the last real row.
struct DeviceBatch {
  DevicePtr q, k_cache, v_cache, cu_seqlens_q, seq_lens_k, block_tables, out;
  cuda::PagedAttentionArgs args;
  size_t out_elems = 0;  // including the guard row
};

DeviceBatch upload(const Problem& p, const HostBatch& b);
void poison_output(DeviceBatch& d);
std::vector<uint16_t> download_output(const DeviceBatch& d);

struct Comparison {
  size_t unwritten = 0;      // NaN left in a real row (never written) or any non-finite value
  size_t guard_touched = 0;  // guard-row elements that lost their poison
  double max_abs = 0;
  double rel = 0;  // ||out - ref|| / ||ref||
  std::string str() const;
};

Comparison compare(const std::vector<uint16_t>& out, const std::vector<double>& ref, size_t guard_elems);

}  // namespace nanovllm::attention_test
