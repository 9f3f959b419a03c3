#pragma once
// How the split-KV decode divides the keys: host-side arithmetic shared by the launcher and the workspace
// sizing, so that a workspace sized for some bounds fits every launch within them.
#include <algorithm>
#include <cstddef>

namespace nanovllm::cuda::attention_detail {

// Keys per split at least: the partial's write-back stays small beside the reads. Measured on an H200: 256
// helps one very long sequence (batch 1 x 32k: 96 us vs 139 us at 128) but slows batch 1 x 4k, the bound decode
// graphs are captured with (33 vs 29 us a layer, +0.15 ms a token), so it stays 128.
constexpr int kDecodeMinChunk = 128;
// Splitting stops once (seqs x KV heads x splits) reaches this (~16/SM). Measured on an H200 (bench_attention,
// 0.6B shapes): grids of ~1024 CTAs streamed K/V at 72-73% of copy bandwidth, ~2048 CTAs at 88%.
constexpr int kDecodeTargetCtas = 2048;
constexpr int kDecodeChunkAlign = 64;  // chunks are whole CTA iterations (32 or 64 keys)
constexpr int kDecodeMaxGroup = 8;     // query heads per KV head

struct DecodePlan {
  int num_splits = 1;
  int chunk = 0;  // keys per split; split s covers [s * chunk, (s + 1) * chunk)
};

constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Split only as far as needed to fill the GPU: few sequences or few KV heads get more splits; a large batch
// gets one split per CTA and no merge pass. Monotone in max_seqlen_k and bounded by both limits below.
inline DecodePlan plan_decode(int num_seqs, int num_kv_heads, int max_seqlen_k) {
  const int keys = std::max(max_seqlen_k, 1);
  const int by_length = ceil_div(keys, kDecodeMinChunk);
  const int by_occupancy = ceil_div(kDecodeTargetCtas, std::max(num_seqs * num_kv_heads, 1));
  const int wanted = std::max(1, std::min(by_length, by_occupancy));
  DecodePlan plan;
  plan.chunk = ceil_div(ceil_div(keys, wanted), kDecodeChunkAlign) * kDecodeChunkAlign;
  plan.num_splits = ceil_div(keys, plan.chunk);
  return plan;
}

// Upper bound of num_seqs * num_splits over every launch with num_seqs <= max_num_seqs, any num_kv_heads >= 1
// and max_seqlen_k <= the bound: splits <= min(ceil(L / min_chunk), ceil(target / num_seqs)).
inline size_t decode_workspace_floats(int max_num_seqs, int num_heads, int head_dim, int max_seqlen_k) {
  if (max_num_seqs <= 0 || num_heads <= 0 || head_dim <= 0) return 0;
  const size_t by_length = static_cast<size_t>(max_num_seqs) * ceil_div(std::max(max_seqlen_k, 1), kDecodeMinChunk);
  const size_t by_occupancy = static_cast<size_t>(kDecodeTargetCtas) + max_num_seqs;
  const size_t seq_splits = std::min(by_length, by_occupancy);
  return seq_splits * num_heads * (static_cast<size_t>(head_dim) + 2);  // acc[d] + (max, sum)
}

}  // namespace nanovllm::cuda::attention_detail
