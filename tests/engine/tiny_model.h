#pragma once
// The tiny golden checkpoint's config with random weights, for engine tests that run a real (small) model on
// the CPU: alone (no tokenizer), or in a folder with the Qwen3 tokenizer files beside it.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "nanovllm/config.h"

namespace nanovllm::test {

inline EngineConfig tiny_config(int tensor_parallel_size = 1) {
  EngineConfig c;
  c.model = NANOVLLM_CONFIGS_DIR "/golden_tied_gqa2.json";
  c.load_dummy_weights = true;
  c.device = "cpu";
  c.max_model_len = 256;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 256;
  c.kvcache_block_size = 16;
  c.num_kvcache_blocks = 40;
  c.tensor_parallel_size = tensor_parallel_size;
  c.show_progress = false;
  return c;
}

// `length` token ids of the tiny model's vocabulary (512), none of them BOS or EOS.
inline std::vector<int32_t> random_prompt(std::mt19937& rng, int length) {
  std::uniform_int_distribution<int32_t> token(3, 511);
  std::vector<int32_t> ids(length);
  for (auto& id : ids) id = token(rng);
  return ids;
}

// A folder `name`_<pid> in the temp dir with the tiny model's config.json and the Qwen3 tokenizer files
// (NANOVLLM_QWEN3_TOKENIZER_DIR or third_party_data/qwen3-tokenizer); an empty path when they are not there.
inline std::filesystem::path tiny_model_with_tokenizer(const std::string& name) {
  namespace fs = std::filesystem;
  const char* env = std::getenv("NANOVLLM_QWEN3_TOKENIZER_DIR");
  const fs::path tokenizer =
      env ? fs::path(env) : fs::path(NANOVLLM_SOURCE_DIR) / "third_party_data" / "qwen3-tokenizer";
  if (!fs::exists(tokenizer / "tokenizer_config.json")) return {};
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(NANOVLLM_CONFIGS_DIR "/golden_tied_gqa2.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(tokenizer / file, dir / file, fs::copy_options::overwrite_existing);
  return dir;
}

}  // namespace nanovllm::test
