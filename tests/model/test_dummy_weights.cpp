#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/half_float.h"
#include "model/weight_source.h"

namespace nanovllm {
namespace {

ModelConfig config_of(const char* architecture, bool tied) {
  nlohmann::json j = {{"architectures", {architecture}}, {"vocab_size", 1001},     {"hidden_size", 96},
                      {"intermediate_size", 200},        {"num_hidden_layers", 2}, {"num_attention_heads", 6},
                      {"num_key_value_heads", 2},        {"head_dim", 24},         {"tie_word_embeddings", tied}};
  return ModelConfig::from_json(j, nullptr);
}

std::vector<float> as_floats(const HostTensor& t) {
  EXPECT_EQ(t.view.dtype, DType::BF16);
  std::vector<float> out(static_cast<size_t>(t.view.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(static_cast<const uint16_t*>(t.view.data)[i]);
  return out;
}

TEST(DummyWeights, ContainsEveryParameterOfTheArchitecture) {
  DummyWeights qwen3(config_of("Qwen3ForCausalLM", false), 1);
  EXPECT_TRUE(qwen3.contains("model.embed_tokens.weight"));
  EXPECT_TRUE(qwen3.contains("lm_head.weight"));
  EXPECT_TRUE(qwen3.contains("model.layers.1.self_attn.q_norm.weight"));
  EXPECT_TRUE(qwen3.contains("model.layers.1.self_attn.k_norm.weight"));
  EXPECT_FALSE(qwen3.contains("model.layers.1.self_attn.q_proj.bias"));
  EXPECT_FALSE(qwen3.contains("model.layers.2.mlp.up_proj.weight"));
  EXPECT_EQ(qwen3.layout().size(), 1u + 2 * 11 + 1 + 1);

  DummyWeights qwen2(config_of("Qwen2ForCausalLM", true), 1);
  EXPECT_FALSE(qwen2.contains("lm_head.weight"));
  EXPECT_TRUE(qwen2.contains("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_TRUE(qwen2.contains("model.layers.0.self_attn.k_proj.bias"));
  EXPECT_TRUE(qwen2.contains("model.layers.0.self_attn.v_proj.bias"));
  EXPECT_FALSE(qwen2.contains("model.layers.0.self_attn.q_norm.weight"));
  EXPECT_EQ(qwen2.layout().size(), 1u + 2 * 12 + 1);
}

TEST(DummyWeights, ShapesAreChecked) {
  DummyWeights weights(config_of("Qwen3ForCausalLM", false), 1);
  const HostTensor q = weights.get("model.layers.0.self_attn.q_proj.weight", {144, 96});
  EXPECT_EQ(q.view.shape, (std::vector<int64_t>{144, 96}));
  EXPECT_NE(q.owned, nullptr);
  EXPECT_EQ(weights.get("model.layers.0.self_attn.o_proj.weight", {96, 144}).view.numel(), 96 * 144);
  EXPECT_EQ(weights.get("model.layers.0.self_attn.k_proj.weight", {48, 96}).view.numel(), 48 * 96);
  EXPECT_THROW(weights.get("model.layers.0.self_attn.q_proj.weight", {96, 144}), InvalidInput);
  EXPECT_THROW(weights.get("model.layers.9.mlp.up_proj.weight", {200, 96}), InvalidInput);
}

TEST(DummyWeights, DeterministicPerSeedAndName) {
  const ModelConfig config = config_of("Qwen3ForCausalLM", false);
  DummyWeights a(config, 42), b(config, 42), c(config, 43);
  const auto name = "model.layers.1.mlp.down_proj.weight";
  const auto va = as_floats(a.get(name, {96, 200}));
  EXPECT_EQ(va, as_floats(b.get(name, {96, 200})));
  EXPECT_EQ(va, as_floats(a.get(name, {96, 200})));  // asking twice gives the same values
  const auto vc = as_floats(c.get(name, {96, 200}));
  size_t same = 0;
  for (size_t i = 0; i < va.size(); ++i) same += va[i] == vc[i];
  EXPECT_LT(same, va.size() / 20);
  // Two tensors of one shape differ too.
  const auto up = as_floats(a.get("model.layers.1.mlp.up_proj.weight", {200, 96}));
  const auto gate = as_floats(a.get("model.layers.1.mlp.gate_proj.weight", {200, 96}));
  EXPECT_NE(up, gate);
}

TEST(DummyWeights, IndependentOfThreadCount) {
  const ModelConfig config = config_of("Qwen2ForCausalLM", false);
  DummyWeights weights(config, 9);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = as_floats(weights.get("model.embed_tokens.weight", {1001, 96}));
  omp_set_num_threads(5);
  const auto five = as_floats(weights.get("model.embed_tokens.weight", {1001, 96}));
  omp_set_num_threads(saved);
  EXPECT_EQ(one, five);
}

TEST(DummyWeights, ScalesKeepActivationsOrderOne) {
  DummyWeights weights(config_of("Qwen2ForCausalLM", false), 3);
  auto stats = [](const std::vector<float>& v) {
    double sum = 0, sq = 0;
    for (float x : v) sum += x, sq += double(x) * x;
    const double mean = sum / v.size();
    return std::pair{mean, std::sqrt(sq / v.size() - mean * mean)};
  };
  const auto [down_mean, down_std] = stats(as_floats(weights.get("model.layers.0.mlp.down_proj.weight", {96, 200})));
  EXPECT_NEAR(down_mean, 0.0, 0.005);
  EXPECT_NEAR(down_std, 1.0 / std::sqrt(200.0), 0.05 / std::sqrt(200.0));
  const auto [head_mean, head_std] = stats(as_floats(weights.get("lm_head.weight", {1001, 96})));
  EXPECT_NEAR(head_mean, 0.0, 0.01);
  EXPECT_NEAR(head_std, DummyWeightScales{}.logits_gain / std::sqrt(96.0), 0.03);
  for (float x : as_floats(weights.get("model.layers.1.input_layernorm.weight", {96}))) {
    EXPECT_GE(x, 0.9f - 1.0f / 128);  // one bf16 step near 1
    EXPECT_LE(x, 1.1f + 1.0f / 128);
  }
  const auto bias = as_floats(weights.get("model.layers.1.self_attn.k_proj.bias", {48}));
  float largest = 0;
  for (float x : bias) largest = std::max(largest, std::fabs(x));
  EXPECT_GT(largest, 0.0f);
  EXPECT_LT(largest, 0.05f);
}

TEST(OpenWeights, PicksDummyOrCheckpoint) {
  const ModelConfig config = config_of("Qwen3ForCausalLM", true);
  const auto dummy = open_weights("/nonexistent/folder", config, true, 5);
  EXPECT_TRUE(dummy->contains("model.norm.weight"));
  EXPECT_THROW(open_weights("/nonexistent/folder", config, false, 5), InvalidInput);
}

}  // namespace
}  // namespace nanovllm
