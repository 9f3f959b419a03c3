#include <gtest/gtest.h>

#include "model/generation_config.h"
#include "support/expect_invalid.h"
#include "temp_dir.h"

namespace nanovllm {
namespace {

using nlohmann::json;
using testing::expect_invalid;
using testing::TempDir;
using testing::write_file;

// Qwen3's own generation_config.json.
constexpr const char* kQwen3GenerationConfig = R"({
  "bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
  "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})";

TEST(GenerationConfig, TakesQwen3SamplingDefaults) {
  const GenerationDefaults d = GenerationDefaults::from_json(json::parse(kQwen3GenerationConfig), "g.json");
  EXPECT_EQ(d.temperature, 0.6f);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_EQ(d.top_p, 0.95f);
  EXPECT_FALSE(d.min_p);
  EXPECT_FALSE(d.max_tokens);
  EXPECT_FALSE(d.empty());
  EXPECT_EQ(d.describe(), "temperature=0.6, top_k=20, top_p=0.95");

  SamplingParams p;
  p.min_p = 0.1f;
  d.apply_to(p);
  EXPECT_EQ(p.temperature, 0.6f);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_EQ(p.top_p, 0.95f);
  EXPECT_EQ(p.min_p, 0.1f);  // not in the file: left as it was
  EXPECT_EQ(p.max_tokens, SamplingParams{}.max_tokens);
}

TEST(GenerationConfig, MaxNewTokensAndMinP) {
  const auto d = GenerationDefaults::from_json(json{{"max_new_tokens", 7}, {"min_p", 0.05}, {"top_p", nullptr}}, "g");
  EXPECT_EQ(d.max_tokens, 7);
  EXPECT_EQ(d.min_p, 0.05f);
  EXPECT_FALSE(d.top_p);  // null is absent
  SamplingParams p;
  d.apply_to(p);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(d.describe(), "min_p=0.05, max_tokens=7");
}

TEST(GenerationConfig, WithoutSamplingFieldsIsEmpty) {
  const auto d = GenerationDefaults::from_json(json{{"eos_token_id", 2}, {"do_sample", false}}, "g");
  EXPECT_TRUE(d.empty());
  SamplingParams p;
  d.apply_to(p);
  EXPECT_EQ(p.temperature, SamplingParams{}.temperature);
  EXPECT_EQ(d.describe(), "");
}

TEST(GenerationConfig, WrongTypesNameFileAndField) {
  expect_invalid(
      [] {
        GenerationDefaults::from_json(json{{"temperature", "hot"}}, "m/generation_config.json");
      },
      {"m/generation_config.json", "'temperature'", "number", "\"hot\""});
  expect_invalid(
      [] {
        GenerationDefaults::from_json(json{{"top_k", 2.5}}, "g.json");
      },
      {"g.json", "'top_k'", "integer"});
  expect_invalid([] { GenerationDefaults::from_json(json{{"max_new_tokens", 1e12}}, "g.json"); }, {"'max_new_tokens'"});
  expect_invalid([] { GenerationDefaults::from_json(json::array(), "g.json"); }, {"g.json", "object"});
}

TEST(GenerationConfig, FromDir) {
  TempDir dir;
  EXPECT_TRUE(GenerationDefaults::from_dir(dir.path()).empty());  // no file: no defaults
  write_file(dir / "generation_config.json", kQwen3GenerationConfig);
  EXPECT_EQ(GenerationDefaults::from_dir(dir.path()).top_k, 20);
  write_file(dir / "generation_config.json", "{\"top_k\": ");
  expect_invalid([&] { GenerationDefaults::from_dir(dir.path()); }, {"generation_config.json", "malformed JSON"});
}

}  // namespace
}  // namespace nanovllm
