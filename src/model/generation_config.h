#pragma once
// The sampling defaults a model's generation_config.json recommends (Qwen3: temperature 0.6, top_k 20,
// top_p 0.95). vLLM applies them to requests that do not set a field (`--generation-config auto`); so do we.
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "nanovllm/sampling_params.h"

namespace nanovllm {

struct GenerationDefaults {
  // The fields vLLM takes from generation_config.json; max_new_tokens becomes max_tokens.
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k, max_tokens;

  // Fields of the wrong type throw InvalidInput naming `source` and the field; other fields are ignored.
  static GenerationDefaults from_json(const nlohmann::json& generation_config, const std::string& source);
  // dir/generation_config.json, or no defaults when the folder has none.
  static GenerationDefaults from_dir(const std::filesystem::path& dir);

  bool empty() const;
  // Sets the fields this holds; leaves the others as they are.
  void apply_to(SamplingParams& params) const;
  // "temperature=0.6, top_k=20, top_p=0.95": for a log line.
  std::string describe() const;
};

}  // namespace nanovllm
