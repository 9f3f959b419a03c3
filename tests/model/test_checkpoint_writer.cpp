#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "common/error.h"
#include "model/checkpoint_writer.h"
#include "model/hf_config.h"
#include "model/weight_source.h"
#include "reference_forward.h"
#include "temp_dir.h"

namespace nanovllm {
namespace {

using testing::read_file;
using testing::TempDir;

const std::filesystem::path kConfigs = NANOVLLM_TOOL_CONFIGS_DIR;

std::vector<std::string> folder_files(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(RandomCheckpoint, SameArgumentsSameBytes) {
  for (int shards : {1, 2}) {
    TempDir a, b, c;
    RandomCheckpointOptions options;
    options.config = read_json_file(kConfigs / "golden_untied_sharded.json");
    options.seed = 2024;
    options.shards = shards;
    write_random_checkpoint(options, a.path());
    write_random_checkpoint(options, b.path());
    options.seed = 2025;
    write_random_checkpoint(options, c.path());
    const auto files = folder_files(a.path());
    ASSERT_EQ(files, folder_files(b.path()));
    ASSERT_EQ(files.size(), shards == 1 ? 3u : 5u);
    for (const auto& file : files) {
      EXPECT_EQ(read_file(a / file), read_file(b / file)) << file;
      if (file.ends_with(".safetensors")) EXPECT_NE(read_file(a / file), read_file(c / file)) << file;
      else EXPECT_EQ(read_file(a / file), read_file(c / file)) << file;  // config and index do not depend on the seed
    }
  }
}

TEST(RandomCheckpoint, RewritingAFolderReplacesItsWeights) {
  TempDir dir;
  RandomCheckpointOptions options;
  options.config = read_json_file(kConfigs / "golden_tied_gqa2.json");
  options.shards = 2;
  write_random_checkpoint(options, dir.path());
  options.shards = 1;
  write_random_checkpoint(options, dir.path());
  EXPECT_EQ(folder_files(dir.path()),
            (std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors"}));
}

TEST(RandomCheckpoint, RejectsBadOptions) {
  TempDir dir;
  RandomCheckpointOptions options;
  options.config = read_json_file(kConfigs / "golden_tied_gqa2.json");
  options.shards = 1000;
  EXPECT_THROW(write_random_checkpoint(options, dir.path()), InvalidInput);
  options.shards = 1;
  options.dtype = DType::F16;
  EXPECT_THROW(write_random_checkpoint(options, dir.path()), InvalidInput);
  options.dtype = DType::BF16;
  options.config["architectures"] = {"MistralForCausalLM"};
  EXPECT_THROW(write_random_checkpoint(options, dir.path()), InvalidInput);
}

TEST(RandomCheckpoint, ConfigIsNormalisedButKeepsUnknownFields) {
  TempDir dir;
  RandomCheckpointOptions options;
  options.config = read_json_file(kConfigs / "qwen2_bias.json");
  options.config["my_note"] = "kept";
  options.dtype = DType::F32;
  write_random_checkpoint(options, dir.path());
  const auto written = read_json_file(dir / "config.json");
  EXPECT_EQ(written["torch_dtype"], "float32");
  EXPECT_EQ(written["my_note"], "kept");
  ASSERT_FALSE(options.config.contains("head_dim"));
  EXPECT_EQ(written["head_dim"],
            options.config["hidden_size"].get<int>() / options.config["num_attention_heads"].get<int>());
  const ModelConfig config = ModelConfig::from_dir(dir.path());
  EXPECT_TRUE(config.attention_bias);
  EXPECT_EQ(config.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(read_json_file(dir / "generation_config.json")["eos_token_id"], 2);
}

// The golden checkpoints must give outputs worth comparing: logits spread over a few nats, neither one token
// taking all the probability nor a flat distribution.
TEST(RandomCheckpoint, GoldenModelsGiveNonTrivialLogits) {
  for (const char* name : {"golden_tied_gqa2", "golden_untied_sharded", "qwen2_bias"}) {
    TempDir dir;
    RandomCheckpointOptions options;
    options.config = read_json_file(kConfigs / (std::string(name) + ".json"));
    options.seed = 1234;
    write_random_checkpoint(options, dir.path());
    const ModelConfig config = ModelConfig::from_dir(dir.path());
    CheckpointWeights weights(CheckpointReader::open(dir.path()));

    std::mt19937 rng(7);
    std::vector<int32_t> tokens(24);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % config.vocab_size);
    const auto logits = testing::reference_logits(config, weights, tokens);
    double mean_std = 0, mean_top = 0, min_top = 1, max_top = 0;
    std::vector<int> argmaxes;
    for (const auto& row : logits) {
      double mean = 0, sq = 0;
      for (float v : row) mean += v;
      mean /= row.size();
      for (float v : row) sq += (v - mean) * (v - mean);
      const double best = *std::max_element(row.begin(), row.end());
      double total = 0;
      for (float v : row) total += std::exp(v - best);
      const double top = 1.0 / total;
      mean_std += std::sqrt(sq / row.size()) / logits.size();
      mean_top += top / logits.size();
      min_top = std::min(min_top, top);
      max_top = std::max(max_top, top);
      argmaxes.push_back(static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin()));
    }
    std::sort(argmaxes.begin(), argmaxes.end());
    const auto distinct = std::unique(argmaxes.begin(), argmaxes.end()) - argmaxes.begin();
    std::printf(
        "%-22s logits std %.2f nats, top-1 probability mean %.3f (min %.3f, max %.3f), %ld distinct argmaxes of %zu\n",
        name, mean_std, mean_top, min_top, max_top, static_cast<long>(distinct), logits.size());
    EXPECT_GT(mean_std, 1.5) << name;
    EXPECT_LT(mean_std, 6.0) << name;
    EXPECT_GT(mean_top, 5.0 / config.vocab_size) << name;
    EXPECT_LT(max_top, 0.95) << name;
    EXPECT_GT(distinct, 4) << name;
  }
}

}  // namespace
}  // namespace nanovllm
