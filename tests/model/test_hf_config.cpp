#include <gtest/gtest.h>

#include <filesystem>

#include "common/error.h"
#include "model/hf_config.h"
#include "support/expect_invalid.h"
#include "temp_dir.h"

namespace nanovllm {
namespace {

using nlohmann::json;
using testing::expect_invalid;
using testing::TempDir;
using testing::write_file;

json qwen3_json() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 151936})");
}

json qwen2_json() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "vocab_size": 151936,
    "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "eos_token_id": 151643, "max_position_embeddings": 32768})");
}

TEST(HfConfig, ParsesQwen3) {
  const ModelConfig c = ModelConfig::from_json(qwen3_json(), nullptr);
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_size(), 2048);
  EXPECT_EQ(c.kv_size(), 1024);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{151645});
  EXPECT_EQ(c.bos_token_id, 151643);
}

TEST(HfConfig, ParsesQwen2WithBiasesAndNoQkNorm) {
  const ModelConfig c = ModelConfig::from_json(qwen2_json(), nullptr);
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 896 / 14);  // head_dim absent
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_FALSE(c.bos_token_id.has_value());
}

TEST(HfConfig, DefaultsFollowHuggingFace) {
  json j = qwen3_json();
  for (const char* field : {"head_dim", "tie_word_embeddings", "rope_theta", "rms_norm_eps", "max_position_embeddings",
                            "torch_dtype", "attention_bias", "num_key_value_heads"})
    j.erase(field);
  const ModelConfig c = ModelConfig::from_json(j, nullptr);
  EXPECT_EQ(c.head_dim, 1024 / 16);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.num_key_value_heads, 16);
}

TEST(HfConfig, HeadDimMayDifferFromHiddenOverHeads) {
  json j = qwen3_json();
  j["hidden_size"] = 96;
  j["num_attention_heads"] = 4;
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 32;
  const ModelConfig c = ModelConfig::from_json(j, nullptr);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_size(), 128);
  EXPECT_EQ(c.kv_size(), 64);
}

TEST(HfConfig, UntiedAndQwen3AttentionBias) {
  json j = qwen3_json();
  j["tie_word_embeddings"] = false;
  j["attention_bias"] = true;
  const ModelConfig c = ModelConfig::from_json(j, nullptr);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);
}

TEST(HfConfig, ArchitectureFromModelTypeWhenArchitecturesAbsent) {
  json j = qwen2_json();
  j.erase("architectures");
  j["model_type"] = "qwen2";
  EXPECT_EQ(ModelConfig::from_json(j, nullptr).architecture, "Qwen2ForCausalLM");
  j["model_type"] = "qwen3";
  EXPECT_EQ(ModelConfig::from_json(j, nullptr).architecture, "Qwen3ForCausalLM");
}

TEST(HfConfig, EosFromGenerationConfigIntOrList) {
  const json gen_list = json::parse(R"({"eos_token_id": [151645, 151643], "bos_token_id": 151643})");
  EXPECT_EQ(ModelConfig::from_json(qwen3_json(), &gen_list).eos_token_ids, (std::vector<int32_t>{151645, 151643}));
  const json gen_int = json::parse(R"({"eos_token_id": 7})");
  EXPECT_EQ(ModelConfig::from_json(qwen3_json(), &gen_int).eos_token_ids, std::vector<int32_t>{7});
  const json gen_none = json::parse(R"({"do_sample": true})");
  EXPECT_EQ(ModelConfig::from_json(qwen3_json(), &gen_none).eos_token_ids, std::vector<int32_t>{151645});
  json j = qwen3_json();
  j["eos_token_id"] = {5, 6, 9};
  EXPECT_EQ(ModelConfig::from_json(j, nullptr).eos_token_ids, (std::vector<int32_t>{5, 6, 9}));
  j.erase("eos_token_id");
  EXPECT_TRUE(ModelConfig::from_json(j, nullptr).eos_token_ids.empty());
}

TEST(HfConfig, MissingRequiredFieldIsNamed) {
  for (const char* field :
       {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    json j = qwen3_json();
    j.erase(field);
    expect_invalid([&] { ModelConfig::from_json(j, nullptr); },
                   {"config.json", std::string("'") + field + "'", "missing"});
  }
}

TEST(HfConfig, RejectsUnsupportedArchitecture) {
  json j = qwen3_json();
  j["architectures"] = {"LlamaForCausalLM"};
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); },
                 {"config.json: architecture 'LlamaForCausalLM' is not supported (supported: Qwen3ForCausalLM, "
                  "Qwen2ForCausalLM)"});
  j.erase("architectures");
  j["model_type"] = "llama";
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"architecture 'llama' is not supported"});
}

TEST(HfConfig, RejectsRopeScaling) {
  json j = qwen3_json();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"rope_scaling type 'yarn' is not supported"});
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"rope_scaling type 'linear' is not supported"});
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_NO_THROW(ModelConfig::from_json(j, nullptr));
}

TEST(HfConfig, RopeParametersOfTransformersFive) {
  json j = qwen3_json();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  EXPECT_DOUBLE_EQ(ModelConfig::from_json(j, nullptr).rope_theta, 5e5);
}

TEST(HfConfig, RejectsBadValues) {
  json j = qwen3_json();
  j["num_key_value_heads"] = 3;
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"num_attention_heads (16)", "num_key_value_heads (3)"});
  j = qwen3_json();
  j["hidden_size"] = "1024";
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"'hidden_size' must be an integer"});
  j = qwen3_json();
  j["vocab_size"] = 0;
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"'vocab_size' must be positive"});
  j = qwen3_json();
  j["torch_dtype"] = "int8";
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"dtype 'int8' is not supported"});
  j = qwen3_json();
  j["use_sliding_window"] = true;
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"use_sliding_window"});
  j = qwen3_json();
  j["hidden_act"] = "gelu";
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"hidden_act \"gelu\" is not supported"});
}

TEST(HfConfig, DtypeFieldOfTransformersFive) {
  json j = qwen3_json();
  j.erase("torch_dtype");
  j["dtype"] = "float16";
  EXPECT_EQ(ModelConfig::from_json(j, nullptr).torch_dtype, DType::F16);
  j["dtype"] = "float32";
  EXPECT_EQ(ModelConfig::from_json(j, nullptr).torch_dtype, DType::F32);
}

TEST(HfConfig, ToJsonRoundTrips) {
  for (const json& source : {qwen3_json(), qwen2_json()}) {
    const ModelConfig a = ModelConfig::from_json(source, nullptr);
    const ModelConfig b = ModelConfig::from_json(a.to_json(), nullptr);
    EXPECT_EQ(a.architecture, b.architecture);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.attention_bias, b.attention_bias);
    EXPECT_EQ(a.qk_norm, b.qk_norm);
    EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
    EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
    EXPECT_EQ(a.bos_token_id, b.bos_token_id);
    EXPECT_EQ(a.torch_dtype, b.torch_dtype);
  }
  EXPECT_EQ(ModelConfig::from_json(qwen3_json(), nullptr).to_json()["rms_norm_eps"].dump(), "1e-06");
}

TEST(HfConfig, FromDirReadsBothFiles) {
  TempDir dir;
  write_file(dir / "config.json", qwen3_json().dump());
  write_file(dir / "generation_config.json", R"({"eos_token_id": [151645, 151643]})");
  const ModelConfig c = ModelConfig::from_dir(dir.path());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{151645, 151643}));
}

TEST(HfConfig, FromDirErrors) {
  expect_invalid([] { ModelConfig::from_dir("/nonexistent/model_dir"); },
                 {"model folder '/nonexistent/model_dir' does not exist"});
  TempDir dir;
  expect_invalid([&] { ModelConfig::from_dir(dir.path()); }, {"has no config.json"});
  write_file(dir / "config.json", "{\"vocab_size\": 12,\n \"hidden_size\": }");
  expect_invalid([&] { ModelConfig::from_dir(dir.path()); }, {"config.json", "malformed JSON at byte"});
  write_file(dir / "config.json", qwen3_json().dump());
  write_file(dir / "generation_config.json", "{\"eos_token_id\": [1, 2");
  expect_invalid([&] { ModelConfig::from_dir(dir.path()); }, {"generation_config.json", "malformed JSON"});
  json j = qwen3_json();
  j.erase("intermediate_size");
  write_file(dir / "config.json", j.dump());
  std::filesystem::remove(dir / "generation_config.json");
  expect_invalid([&] { ModelConfig::from_dir(dir.path()); },
                 {(dir.path() / "config.json").string(), "'intermediate_size'"});
}

// The real shapes of the Qwen3 family (configs only, no weights) parse as their model cards say.
TEST(HfConfig, RealQwen3ConfigsParse) {
  const std::filesystem::path models = NANOVLLM_QWEN3_CONFIGS_DIR;
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(models)) {
    if (entry.path().extension() != ".json") continue;
    const ModelConfig c = ModelConfig::from_json(read_json_file(entry.path()), nullptr);
    EXPECT_EQ(c.architecture, "Qwen3ForCausalLM") << entry.path();
    EXPECT_EQ(c.head_dim, 128) << entry.path();
    EXPECT_EQ(c.vocab_size, 151936) << entry.path();
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.num_attention_heads % c.num_key_value_heads, 0);
    const std::string name = entry.path().filename().string();
    if (name.rfind("Qwen3-0.6B", 0) == 0) {
      EXPECT_TRUE(c.tie_word_embeddings);
      EXPECT_EQ(c.hidden_size, 1024);
      EXPECT_EQ(c.num_hidden_layers, 28);
    }
    if (name.rfind("Qwen3-8B", 0) == 0) {
      EXPECT_FALSE(c.tie_word_embeddings);
      EXPECT_EQ(c.hidden_size, 4096);
      EXPECT_EQ(c.q_size(), 4096);
      EXPECT_EQ(c.kv_size(), 1024);
    }
    ++parsed;
  }
  EXPECT_GE(parsed, 6);
}

}  // namespace
}  // namespace nanovllm
