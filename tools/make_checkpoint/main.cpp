// nanovllm-make-checkpoint: writes a random-weight Hugging Face model folder from a config.json, reproducibly
// from the seed (same arguments, same bytes), so tests regenerate checkpoints instead of committing weights.
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "common/error.h"
#include "model/checkpoint_writer.h"
#include "model/hf_config.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Write a random-weight Qwen2/Qwen3 checkpoint folder (config.json, generation_config.json, safetensors)"};
  std::string config_path, out_dir, dtype = "bfloat16", tokenizer_dir, quantization = "none";
  uint64_t seed = 0;
  int shards = 1;
  app.add_option("--config", config_path, "config.json to build the model from")->required()->check(CLI::ExistingFile);
  app.add_option("--out", out_dir, "output folder (created; weights already there are replaced)")->required();
  app.add_option("--seed", seed, "seed of the random weights")->required();
  app.add_option("--shards", shards, "number of safetensors shards (1 = model.safetensors)")
      ->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype, "dtype on disk")->check(CLI::IsMember({"float32", "bfloat16"}));
  app.add_option("--quantization", quantization,
                 "fp8: the decoder layers' linear weights in block-scaled FP8 (F8_E4M3 + weight_scale_inv)")
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_option("--tokenizer-dir", tokenizer_dir, "folder whose tokenizer.json / tokenizer_config.json are copied")
      ->check(CLI::ExistingDirectory);
  CLI11_PARSE(app, argc, argv);

  try {
    nanovllm::RandomCheckpointOptions options;
    options.config = nanovllm::read_json_file(config_path);
    options.seed = seed;
    options.shards = shards;
    options.dtype = nanovllm::dtype_from_torch_name(dtype, "--dtype");
    if (quantization == "fp8") options.quantization = nanovllm::WeightQuantization::Method::kFp8;
    if (!tokenizer_dir.empty()) options.tokenizer_dir = tokenizer_dir;
    nanovllm::write_random_checkpoint(options, out_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nanovllm-make-checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
