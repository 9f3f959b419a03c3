// EngineConfig::validate(): settings the engine can run with; the step policies' names.
#include <cmath>
#include <string>

#include "engine/validation_message.h"
#include "nanovllm/config.h"

namespace nanovllm {

std::string to_string(StepPolicy policy) {
  return policy == StepPolicy::PrefillFirst ? "prefill-first" : "decode-first";
}

StepPolicy parse_step_policy(const std::string& name) {
  for (StepPolicy p : {StepPolicy::DecodeFirst, StepPolicy::PrefillFirst})
    if (name == to_string(p)) return p;
  throw_invalid_setting("step_policy", "decode-first or prefill-first", name);
}

namespace {
constexpr int kMinBlockSize = 16;
constexpr int kMaxBlockSize = 256;

bool is_power_of_two(int value) { return value > 0 && (value & (value - 1)) == 0; }
}  // namespace

void EngineConfig::validate() const {
  if (model.empty()) throw_invalid_setting("model", "a model folder (non-empty)", model);
  if (device != "auto" && device != "cpu" && device != "cuda") {
    throw_invalid_setting("device", "one of auto, cpu, cuda", device);
  }
  if (max_num_batched_tokens < 1) throw_invalid_setting("max_num_batched_tokens", ">= 1", max_num_batched_tokens);
  if (max_num_seqs < 1) throw_invalid_setting("max_num_seqs", ">= 1", max_num_seqs);
  if (max_model_len < 1) throw_invalid_setting("max_model_len", ">= 1", max_model_len);
  if (!(gpu_memory_utilization > 0.0f && gpu_memory_utilization <= 1.0f)) {
    throw_invalid_setting("gpu_memory_utilization", "in (0, 1]", gpu_memory_utilization);
  }
  if (tensor_parallel_size < 1) throw_invalid_setting("tensor_parallel_size", ">= 1", tensor_parallel_size);
  if (!is_power_of_two(kvcache_block_size) || kvcache_block_size < kMinBlockSize ||
      kvcache_block_size > kMaxBlockSize) {
    throw_invalid_setting("kvcache_block_size", "a power of two in [16, 256]", kvcache_block_size);
  }
  if (kv_cache_dtype != "auto" && !fp8_kv_cache())
    throw_invalid_setting("kv_cache_dtype", "auto, fp8 or fp8_e4m3", kv_cache_dtype);
  if (num_kvcache_blocks != -1 && num_kvcache_blocks < 1) {
    throw_invalid_setting("num_kvcache_blocks", "-1 (size from memory) or >= 1", num_kvcache_blocks);
  }
  if (!quantization.empty() && quantization != "none" && quantization != "fp8")
    throw_invalid_setting("quantization", "none or fp8", quantization);
  if (!(std::isfinite(cpu_kvcache_space_gib) && cpu_kvcache_space_gib > 0.0)) {
    throw_invalid_setting("cpu_kvcache_space_gib", "> 0 and finite", cpu_kvcache_space_gib);
  }
}

}  // namespace nanovllm
