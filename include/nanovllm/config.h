#pragma once
// Engine settings; the names mirror nano-vLLM's Config (and vLLM's engine arguments).
#include <cstdint>
#include <string>

namespace nanovllm {

// How a step's token budget (max_num_batched_tokens) is shared between running sequences and prompts.
enum class StepPolicy {
  // vLLM V1: one decode token for every running sequence first, then prompt chunks in the rest of the budget,
  // so a step can mix prefill and decode rows and a long prompt never stalls the running streams.
  DecodeFirst,
  // nano-vLLM: while a prompt is waiting (and fits) or partly prefilled, steps prefill and nothing decodes.
  PrefillFirst,
};
// "decode-first" / "prefill-first", the names the CLI and the Python package take.
std::string to_string(StepPolicy policy);
// Throws InvalidInput naming the value for any other name.
StepPolicy parse_step_policy(const std::string& name);

struct EngineConfig {
  std::string model;                   // Hugging Face model folder
  std::string device = "auto";         // auto | cpu | cuda
  int max_num_batched_tokens = 16384;  // tokens computed in one step at most
  int max_num_seqs = 512;              // sequences in one step at most
  int max_model_len = 4096;            // prompt + output tokens of one sequence at most
  float gpu_memory_utilization = 0.9f;
  int tensor_parallel_size = 1;
  bool enforce_eager = false;          // no CUDA graphs
  int kvcache_block_size = 256;        // tokens per KV block: a power of two, 16..256
  int num_kvcache_blocks = -1;         // -1 = size from memory
  double cpu_kvcache_space_gib = 4.0;  // CPU backend: KV cache budget (vLLM's VLLM_CPU_KVCACHE_SPACE)
  // KV cache element type: auto (the backend's compute dtype) | fp8 (= fp8_e4m3: half of bf16's bytes, per-layer
  // scales from the checkpoint's self_attn.k_scale / v_scale, else 1.0), as vLLM's kv_cache_dtype.
  std::string kv_cache_dtype = "auto";
  bool enable_prefix_caching = true;
  // Launch a decode step's successor before its sampled ids reach the host, when the successor is known (the same
  // sequences one token on), as vLLM's async_scheduling; one rank only (docs/online_engine.md).
  bool async_scheduling = true;
  StepPolicy step_policy = StepPolicy::DecodeFirst;
  bool load_dummy_weights = false;  // random weights from config.json alone (vLLM's load_format=dummy)
  // "" / "none": weights as the checkpoint stores them (an FP8 checkpoint loads as FP8); "fp8": the decoder
  // layers' linear weights quantised at load to block-scaled FP8 (docs/fp8.md), as vLLM's --quantization fp8.
  std::string quantization;
  uint64_t seed = 0;          // dummy weights and requests without a seed of their own
  bool show_progress = true;  // progress bar of LLM::generate on stderr

  // Throws InvalidInput naming the first bad setting.
  void validate() const;
  bool fp8_kv_cache() const { return kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3"; }
};

}  // namespace nanovllm
