#include "engine_options.h"

#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include "common/error.h"
#include "model/generation_config.h"

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
  cmd.add_option("--kv-cache-dtype", config.kv_cache_dtype,
                 "auto (the model's dtype) | fp8 (e4m3; scales from the checkpoint, else 1.0)")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3"}))
      ->capture_default_str();
  cmd.add_flag("!--no-prefix-caching", config.enable_prefix_caching, "disable prefix caching");
  cmd.add_flag("!--no-async-scheduling", config.async_scheduling,
               "launch each decode step only after the last one's tokens reached the host (by default a decode "
               "step whose successor is known, the same sequences one token on, launches it early)");
  cmd.add_option_function<std::string>(
         "--step-policy", [this](const std::string& name) { config.step_policy = parse_step_policy(name); },
         "decode-first (vLLM V1: steps mix decode and prefill rows) | prefill-first (nano-vLLM)")
      ->check(CLI::IsMember({"decode-first", "prefill-first"}))
      ->default_str("decode-first");
  cmd.add_option("--load-format", load_format, "auto | dummy (random weights from config.json)")->capture_default_str();
  cmd.add_option("--quantization", config.quantization,
                 "none | fp8 (the decoder linears quantised to block-scaled FP8 as they load; an FP8 checkpoint "
                 "loads as FP8 either way)")
      ->default_str("none");
  cmd.add_option("--seed", config.seed, "seed of dummy weights and of requests without one")->capture_default_str();
  cmd.add_flag("!--no-progress", config.show_progress, "no progress bar");
}

EngineConfig EngineOptions::resolve() const {
  EngineConfig c = config;
  if (load_format == "dummy") c.load_dummy_weights = true;
  else if (load_format != "auto") throw InvalidInput("--load-format must be auto or dummy, got '" + load_format + "'");
  // A missing path is left to the engine, which names the folder that does not exist.
  if (!c.load_dummy_weights && std::filesystem::exists(c.model) && !std::filesystem::is_directory(c.model))
    throw InvalidInput("--model must be a model folder with config.json and *.safetensors weights; got a file '" +
                       c.model + "' (a config.json alone runs on random weights with --load-format dummy)");
  return c;
}

void SamplingOptions::add_to(CLI::App& cmd) {
  const SamplingParams builtin;
  const auto default_note = [](const auto& value, const char* field = "") {
    std::ostringstream text;
    text << "request default (else generation_config.json's" << field << ", else " << value << ")";
    return text.str();
  };
  cmd.add_option("--temperature", temperature, default_note(builtin.temperature));
  cmd.add_option("--top-k", top_k, default_note(builtin.top_k));
  cmd.add_option("--top-p", top_p, default_note(builtin.top_p));
  cmd.add_option("--min-p", min_p, default_note(builtin.min_p));
  cmd.add_option("--max-tokens", max_tokens, default_note(builtin.max_tokens, " max_new_tokens"));
  cmd.add_option("--min-tokens", min_tokens, "request default (else " + std::to_string(builtin.min_tokens) + ")");
  cmd.add_flag("--ignore-eos", ignore_eos);
  cmd.add_option("--logprobs", logprobs, "top-k logprobs of each output token");
  cmd.add_option("--prompt-logprobs", prompt_logprobs, "top-k logprobs of each prompt token");
  cmd.add_option("--generation-config", generation_config,
                 "sampling defaults from generation_config.json: auto (the model folder's), vllm (none: the "
                 "built-in defaults, which are vLLM's) or a folder holding one")
      ->capture_default_str();
}

SamplingParams SamplingOptions::resolve(const std::string& model) const {
  SamplingParams p;
  std::optional<std::filesystem::path> folder;
  if (generation_config == "auto") {
    if (std::filesystem::is_directory(model)) folder = model;  // a config.json alone has no generation config
  } else if (generation_config != "vllm") {
    if (!std::filesystem::exists(std::filesystem::path(generation_config) / "generation_config.json"))
      throw InvalidInput("--generation-config must be auto, vllm or a folder with generation_config.json, got '" +
                         generation_config + "'");
    folder = generation_config;
  }
  if (folder) {
    const GenerationDefaults from_model = GenerationDefaults::from_dir(*folder);
    if (!from_model.empty()) {
      from_model.apply_to(p);
      std::cerr << "nanovllm: sampling defaults from " << (*folder / "generation_config.json").string() << ": "
                << from_model.describe() << " (--generation-config vllm ignores them)\n";
    }
  }
  if (temperature) p.temperature = *temperature;
  if (top_k) p.top_k = *top_k;
  if (top_p) p.top_p = *top_p;
  if (min_p) p.min_p = *min_p;
  if (max_tokens) p.max_tokens = *max_tokens;
  if (min_tokens) p.min_tokens = *min_tokens;
  p.ignore_eos = ignore_eos;
  p.logprobs = logprobs;
  p.prompt_logprobs = prompt_logprobs;
  return p;
}

}  // namespace nanovllm::cli
