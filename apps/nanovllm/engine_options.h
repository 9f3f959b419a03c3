#pragma once
// Engine and default sampling flags shared by the `generate` and `bench` subcommands.
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "nanovllm/config.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm::cli {

struct EngineOptions {
  EngineConfig config;
  std::string load_format = "auto";
  void add_to(CLI::App& cmd);
  // Applies load_format; throws InvalidInput on a bad value or a --model that is not a folder (only random
  // weights can be made from a config.json file alone).
  EngineConfig resolve() const;
};

// The sampling flags: defaults for requests that do not set a field. A field's default comes from, first to
// last: the flag, the model's generation_config.json (vLLM's --generation-config: "auto" reads the model
// folder's, "vllm" none, or another folder's), SamplingParams' own default.
struct SamplingOptions {
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k, max_tokens, min_tokens;
  bool ignore_eos = false;
  std::optional<int> logprobs, prompt_logprobs;
  std::string generation_config = "auto";

  void add_to(CLI::App& cmd);
  // The request defaults for `model` (a folder, or a config.json with random weights). Says on stderr which
  // generation_config.json fields it applied.
  SamplingParams resolve(const std::string& model) const;
};

}  // namespace nanovllm::cli
