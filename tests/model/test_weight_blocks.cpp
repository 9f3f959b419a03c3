// WeightSource::get_block: a tensor-parallel rank's shard must hold exactly the elements of the whole tensor
// at its rows and columns, whether the source maps stored tensors (the generic path) or generates them.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>

#include "common/error.h"
#include "model/weight_source.h"
#include "support/float_bits.h"

namespace nanovllm {
namespace {

// A stored F32 tensor [5, 7] and a vector [9] of random values, served through the generic get_block.
class InMemoryWeights : public WeightSource {
 public:
  InMemoryWeights() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (auto& v : matrix_) v = u(rng);
    for (auto& v : vector_) v = u(rng);
  }
  HostTensor get(const std::string& name, const std::vector<int64_t>& shape) override {
    if (name == "m" && shape == std::vector<int64_t>{5, 7})
      return {HostTensorView{matrix_.data(), DType::F32, shape}, nullptr};
    if (name == "v" && shape == std::vector<int64_t>{9})
      return {HostTensorView{vector_.data(), DType::F32, shape}, nullptr};
    throw InvalidInput("no tensor '" + name + "'");
  }
  bool contains(const std::string& name) const override { return name == "m" || name == "v"; }
  std::vector<float> matrix_ = std::vector<float>(35), vector_ = std::vector<float>(9);
};

TEST(WeightBlocks, GenericBlocksAreTheWholeTensorsElements) {
  InMemoryWeights w;
  for (auto [r0, r1, c0, c1] :
       {std::array<int64_t, 4>{0, 5, 0, 7}, {1, 4, 0, 7}, {0, 5, 3, 7}, {2, 3, 1, 2}, {4, 5, 0, 3}}) {
    HostTensor b = w.get_block("m", {5, 7}, {r0, r1}, {c0, c1});
    ASSERT_EQ(b.view.shape, (std::vector<int64_t>{r1 - r0, c1 - c0}));
    const float* got = static_cast<const float*>(b.view.data);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c)
        ASSERT_EQ(got[(r - r0) * (c1 - c0) + (c - c0)], w.matrix_[r * 7 + c]) << r << "," << c;
  }
  HostTensor v = w.get_block("v", {9}, {3, 8}, {0, 1});
  ASSERT_EQ(v.view.shape, std::vector<int64_t>{5});
  EXPECT_EQ(testing::float_bits(v.view.data, 5), testing::float_bits(w.vector_.data() + 3, 5));
  EXPECT_THROW(w.get_block("m", {5, 7}, {0, 6}, {0, 7}), EngineError);  // past the last row
  EXPECT_THROW(w.get_block("m", {5, 7}, {0, 5}, {5, 8}), EngineError);  // past the last column
  // A wrong full shape is get()'s to refuse: get_block must hand expected_shape on to it.
  EXPECT_THROW(w.get_block("m", {5, 8}, {0, 5}, {0, 7}), InvalidInput);
}

TEST(WeightBlocks, DummyBlocksAreGeneratedAsTheWholeTensorsElements) {
  nlohmann::json j = {{"architectures", {"Qwen2ForCausalLM"}},
                      {"vocab_size", 701},
                      {"hidden_size", 96},
                      {"intermediate_size", 160},
                      {"num_hidden_layers", 1},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"tie_word_embeddings", false}};
  const ModelConfig config = ModelConfig::from_json(j, nullptr);
  DummyWeights w(config, 99);
  struct Case {
    std::string name;
    std::vector<int64_t> shape;
    IndexRange rows, cols;
  };
  for (const Case& c : {Case{"lm_head.weight", {701, 96}, {351, 701}, {0, 96}},
                        Case{"model.layers.0.mlp.down_proj.weight", {96, 160}, {0, 96}, {40, 80}},
                        Case{"model.layers.0.self_attn.k_proj.bias", {48}, {24, 48}, {0, 1}}}) {
    HostTensor whole = w.get(c.name, c.shape);
    HostTensor block = w.get_block(c.name, c.shape, c.rows, c.cols);
    const int64_t cols = c.shape.size() > 1 ? c.shape[1] : 1, width = c.cols.size();
    const auto* all = static_cast<const uint16_t*>(whole.view.data);
    const auto* got = static_cast<const uint16_t*>(block.view.data);
    ASSERT_EQ(block.view.numel(), c.rows.size() * width) << c.name;
    for (int64_t r = c.rows.begin; r < c.rows.end; ++r)
      for (int64_t k = c.cols.begin; k < c.cols.end; ++k)
        ASSERT_EQ(got[(r - c.rows.begin) * width + (k - c.cols.begin)], all[r * cols + k])
            << c.name << " " << r << "," << k;
  }
}

}  // namespace
}  // namespace nanovllm
