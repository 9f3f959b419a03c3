#pragma once
// The public C++ API: LLM::generate(prompts, SamplingParams), as in nano-vLLM and vLLM.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nanovllm/config.h"
#include "nanovllm/outputs.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm {

class LLMEngine;

// What the engine set up when it was made.
struct EngineSummary {
  std::string backend;           // "cpu", "cuda:<GPU>", with " x<N> (tensor parallel over ...)" for N ranks
  int num_kvcache_blocks = 0;    // of kvcache_block_size tokens each
  size_t kv_cache_bytes = 0;     // over all ranks
  size_t weight_bytes = 0;       // over all ranks
  double startup_seconds = 0.0;  // loading the model, sizing the KV cache, capturing graphs
};

class LLM {
 public:
  explicit LLM(EngineConfig config);
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  // Runs all prompts to completion in one continuous batch; outputs in input order. A request that is
  // invalid gets its error field set and the others still run.
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params);
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts, const SamplingParams& params);
  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts, const SamplingParams& params);

  // Chat messages (OpenAI style: [{"role": ..., "content": ...}]) -> prompt text through the model's chat
  // template (tokenizer_config.json's); tools and extra (template variables) may be null. Throws InvalidInput
  // when the model has no template.
  std::string apply_chat_template(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  bool add_generation_prompt, const nlohmann::ordered_json& extra) const;

  EngineSummary summary() const;

 private:
  std::unique_ptr<LLMEngine> engine_;
};

}  // namespace nanovllm
