#pragma once
// Which part of the Qwen3 model one tensor-parallel rank holds (Megatron-style, as in nano-vLLM):
// query heads and the MLP's intermediate columns are divided evenly; KV heads are divided when there are at
// least as many as ranks and replicated otherwise (vLLM's rule: each rank keeps the one KV head its query
// heads read); the vocabulary is cut into equal chunks of ceil(V / size) rows, the last one shorter.
#include <cstdint>

#include "model/hf_config.h"

namespace nanovllm {

struct ShardLayout {
  int rank = 0;
  int size = 1;
  int num_heads = 0;         // query heads of this rank
  int num_kv_heads = 0;      // KV heads of this rank
  int kv_head_start = 0;     // first KV head (of the whole model) this rank holds
  int64_t intermediate = 0;  // MLP columns of this rank
  int64_t vocab_chunk = 0;   // rows per vocabulary chunk (every rank's lm_head / embedding is padded to this)
  int64_t vocab_start = 0;   // first vocabulary row of this rank
  int64_t vocab_rows = 0;    // rows this rank really holds (< vocab_chunk only on the last ranks)

  // Throws InvalidInput when `size` does not divide the model (heads, KV heads, intermediate size).
  static ShardLayout of(const ModelConfig& config, int rank, int size);
  bool sharded() const { return size > 1; }
};

}  // namespace nanovllm
