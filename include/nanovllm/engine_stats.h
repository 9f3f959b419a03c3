#pragma once
// Engine-wide gauges and counters a server exports (vLLM's /metrics): load, KV-cache pressure, prefix-cache hits.
#include <cstdint>

namespace nanovllm {

struct EngineStats {
  int num_running = 0;  // sequences being prefilled or decoded
  int num_waiting = 0;  // sequences queued for their (re)prefill
  int num_kv_blocks = 0;
  int num_free_kv_blocks = 0;
  int64_t num_preemptions = 0;              // since the engine started
  int64_t prefix_cache_queried_tokens = 0;  // since the engine started
  int64_t prefix_cache_hit_tokens = 0;

  // Share of KV blocks held by sequences (free blocks that still cache a prefix count as free).
  double kv_cache_usage() const {
    return num_kv_blocks == 0 ? 0.0 : 1.0 - static_cast<double>(num_free_kv_blocks) / num_kv_blocks;
  }
};

}  // namespace nanovllm
