#include "engine_options.h"

#include <string>

#include "common/error.h"

namespace nanovllm::cli {

void EngineOptions::add_to(CLI::App& cmd) {
  cmd.add_option("--model", config.model, "Hugging Face model folder (or a config.json with --load-format dummy)")
      ->required();
  cmd.add_option("--device", config.device, "auto | cpu | cuda")->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", config.max_num_batched_tokens)->capture_default_str();
  cmd.add_option("--max-num-seqs", config.max_num_seqs)->capture_default_str();
  cmd.add_option("--max-model-len", config.max_model_len)->capture_default_str();
  cmd.add_option("--gpu-memory-utilization", config.gpu_memory_utilization)->capture_default_str();
  cmd.add_option("--tensor-parallel-size", config.tensor_parallel_size)->capture_default_str();
  cmd.add_flag("--enforce-eager", config.enforce_eager, "no CUDA graphs");
  cmd.add_option("--kvcache-block-size", config.kvcache_block_size)->capture_default_str();
  cmd.add_option("--num-kvcache-blocks", config.num_kvcache_blocks, "-1: size from memory")->capture_default_str();
  cmd.add_option("--cpu-kvcache-space", config.cpu_kvcache_space_gib, "GiB of KV cache on the CPU")
      ->capture_default_str();
  cmd.add_flag("!--no-prefix-caching", config.enable_prefix_caching, "disable prefix caching");
  cmd.add_option_function<std::string>(
         "--step-policy",
         [this](const std::string& name) {
           config.step_policy = name == "prefill-first" ? StepPolicy::PrefillFirst : StepPolicy::DecodeFirst;
         },
         "decode-first (vLLM V1: steps mix decode and prefill rows) | prefill-first (nano-vLLM)")
      ->check(CLI::IsMember({"decode-first", "prefill-first"}))
      ->default_str("decode-first");
  cmd.add_option("--load-format", load_format, "auto | dummy (random weights from config.json)")
      ->capture_default_str();
  cmd.add_option("--seed", config.seed, "seed of dummy weights and of requests without one")->capture_default_str();
  cmd.add_flag("!--no-progress", config.show_progress, "no progress bar");
}

EngineConfig EngineOptions::resolve() const {
  EngineConfig c = config;
  if (load_format == "dummy") c.load_dummy_weights = true;
  else if (load_format != "auto") throw InvalidInput("--load-format must be auto or dummy, got '" + load_format + "'");
  return c;
}

void add_sampling_options(CLI::App& cmd, SamplingParams& d, std::optional<int>& logprobs,
                          std::optional<int>& prompt_logprobs) {
  cmd.add_option("--temperature", d.temperature, "default for requests")->capture_default_str();
  cmd.add_option("--top-k", d.top_k)->capture_default_str();
  cmd.add_option("--top-p", d.top_p)->capture_default_str();
  cmd.add_option("--min-p", d.min_p)->capture_default_str();
  cmd.add_option("--max-tokens", d.max_tokens)->capture_default_str();
  cmd.add_option("--min-tokens", d.min_tokens)->capture_default_str();
  cmd.add_flag("--ignore-eos", d.ignore_eos);
  cmd.add_option("--logprobs", logprobs, "top-k logprobs of each output token");
  cmd.add_option("--prompt-logprobs", prompt_logprobs, "top-k logprobs of each prompt token");
}

}  // namespace nanovllm::cli
