#pragma once
// Engine and default sampling flags shared by the `generate` and `bench` subcommands.
#include <CLI/CLI.hpp>

#include "nanovllm/config.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm::cli {

struct EngineOptions {
  EngineConfig config;
  std::string load_format = "auto";
  void add_to(CLI::App& cmd);
  // Applies load_format; throws InvalidInput on a bad value.
  EngineConfig resolve() const;
};

void add_sampling_options(CLI::App& cmd, SamplingParams& defaults, std::optional<int>& logprobs,
                          std::optional<int>& prompt_logprobs);

}  // namespace nanovllm::cli
