// Block-scaled FP8 weights on the host: config.json's quantization_config, the quantisation rule, the FP8
// checkpoint writer, and the blocks WeightSource hands the model (read from a checkpoint or quantised at load).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/fp8.h"
#include "common/half_float.h"
#include "fp8_test_config.h"
#include "model/checkpoint_writer.h"
#include "model/fp8_block_quantizer.h"
#include "model/fp8_quantizing_weights.h"
#include "model/hf_config.h"
#include "model/weight_source.h"
#include "temp_dir.h"

namespace nanovllm {
namespace {

using nlohmann::json;
using testing::fp8_friendly_config;
using testing::fp8_quantization_config;
using testing::TempDir;

TEST(Fp8Config, ParsesQwensQuantizationConfigAndWritesItBack) {
  json j = fp8_friendly_config();
  j["quantization_config"] = fp8_quantization_config();
  j["quantization_config"]["modules_to_not_convert"] = {"lm_head", "model.layers.1.mlp.down_proj", "self_attn.o_proj"};
  const ModelConfig c = ModelConfig::from_json(j, nullptr);
  ASSERT_TRUE(c.quantization.fp8());
  EXPECT_TRUE(c.quantization.quantizes("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(c.quantization.quantizes("model.layers.1.mlp.down_proj"));
  EXPECT_FALSE(c.quantization.quantizes("model.layers.0.self_attn.o_proj"));
  EXPECT_TRUE(c.quantization.quantizes("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(c.quantization.quantizes("lm_head"));
  EXPECT_TRUE(c.quantization.quantizes("model.layers.11.mlp.down_proj"));  // "layers.1" is no prefix of "layers.11"
  const ModelConfig again = ModelConfig::from_json(c.to_json(), nullptr);
  EXPECT_EQ(again.quantization.modules_to_not_convert, c.quantization.modules_to_not_convert);
  EXPECT_EQ(c.to_json()["quantization_config"]["weight_block_size"], json({128, 128}));
  EXPECT_FALSE(ModelConfig::from_json(fp8_friendly_config(), nullptr).quantization.fp8());
  EXPECT_FALSE(ModelConfig::from_json(fp8_friendly_config(), nullptr).to_json().contains("quantization_config"));
}

TEST(Fp8Config, QuantizationSettingDecidesWhatIsQuantisedAtLoad) {
  WeightQuantization none, fp8;
  fp8.method = WeightQuantization::Method::kFp8;
  WeightQuantization q = none;
  EXPECT_FALSE(apply_quantization_setting("", false, q));
  EXPECT_FALSE(q.fp8());
  EXPECT_TRUE(apply_quantization_setting("fp8", false, q));  // a BF16 checkpoint, quantised as it loads
  EXPECT_TRUE(q.fp8());
  q = fp8;
  EXPECT_FALSE(apply_quantization_setting("fp8", false, q));  // already FP8: nothing to do
  EXPECT_FALSE(apply_quantization_setting("none", false, q));
  EXPECT_TRUE(q.fp8());
  EXPECT_TRUE(apply_quantization_setting("", true, q));  // dummy weights of an FP8 model are BF16
  q = none;
  EXPECT_THROW(apply_quantization_setting("awq", false, q), InvalidInput);
}

// A [rows, cols] BF16 weight with one block's values scaled up and one block all zeros.
std::vector<uint16_t> test_weight(int64_t rows, int64_t cols) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  std::vector<uint16_t> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = dist(rng);
      if (r < 128 && c >= 256) v *= 1000.0f;       // block (0, 2): large values
      if (r >= 128 && c >= 128 && c < 256) v = 0;  // block (1, 1): zeros
      w[r * cols + c] = float_to_bf16(v);
    }
  return w;
}

TEST(Fp8Quantizer, FollowsTheBlockRuleAtPartialBlocks) {
  const int64_t rows = 200, cols = 300;
  const std::vector<uint16_t> w = test_weight(rows, cols);
  const Fp8Matrix m = quantize_fp8_blocks(HostTensorView{w.data(), DType::BF16, {rows, cols}});
  ASSERT_EQ(m.scales.size(), 2u * 3u);
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 3; ++bc) {
      float amax = 0;
      for (int64_t r = br * 128; r < std::min<int64_t>(rows, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min<int64_t>(cols, bc * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(bf16_to_float(w[r * cols + c])));
      const float scale = m.scales[br * 3 + bc];
      EXPECT_EQ(scale, amax > 0 ? amax / 448.0f : 1.0f) << br << "," << bc;
      for (int64_t r = br * 128; r < std::min<int64_t>(rows, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min<int64_t>(cols, bc * 128 + 128); ++c) {
          const float value = bf16_to_float(w[r * cols + c]);
          ASSERT_EQ(m.codes[r * cols + c], float_to_fp8_e4m3(value / scale)) << r << "," << c;
          // E4M3 keeps 3 mantissa bits: within 1/16 relative, or the subnormal step near zero.
          const float back = fp8_e4m3_to_float(m.codes[r * cols + c]) * scale;
          ASSERT_LE(std::fabs(back - value), std::fabs(value) / 16 + scale * 0x1p-10f) << r << "," << c;
        }
    }
  EXPECT_EQ(m.scales[1 * 3 + 1], 1.0f);  // the zero block
  EXPECT_GT(m.scales[0 * 3 + 2], 100 * m.scales[0]);
}

RandomCheckpointOptions fp8_checkpoint_options(WeightQuantization::Method method) {
  RandomCheckpointOptions options;
  options.config = fp8_friendly_config();
  options.seed = 77;
  options.quantization = method;
  return options;
}

TEST(Fp8Checkpoint, WritesCodesScalesAndConfigReproducibly) {
  TempDir a, b;
  write_random_checkpoint(fp8_checkpoint_options(WeightQuantization::Method::kFp8), a.path());
  write_random_checkpoint(fp8_checkpoint_options(WeightQuantization::Method::kFp8), b.path());
  EXPECT_EQ(testing::read_file(a / "model.safetensors"), testing::read_file(b / "model.safetensors"));
  const ModelConfig config = ModelConfig::from_dir(a.path());
  EXPECT_TRUE(config.quantization.fp8());
  const CheckpointReader reader = CheckpointReader::open(a.path());
  const HostTensorView q = reader.get("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.dtype, DType::F8_E4M3);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{256, 200}));
  const HostTensorView scale = reader.get("model.layers.0.self_attn.q_proj.weight_scale_inv");
  EXPECT_EQ(scale.dtype, DType::F32);
  EXPECT_EQ(scale.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(reader.get("model.layers.0.input_layernorm.weight").dtype, DType::BF16);
  EXPECT_EQ(reader.get("model.embed_tokens.weight").dtype, DType::BF16);
  EXPECT_EQ(reader.get("lm_head.weight").dtype, DType::BF16);
  EXPECT_FALSE(reader.contains("lm_head.weight_scale_inv"));
}

TEST(Fp8Checkpoint, QuantisingAtLoadGivesTheCheckpointsBlocks) {
  TempDir bf16_dir, fp8_dir;
  write_random_checkpoint(fp8_checkpoint_options(WeightQuantization::Method::kNone), bf16_dir.path());
  write_random_checkpoint(fp8_checkpoint_options(WeightQuantization::Method::kFp8), fp8_dir.path());
  Fp8QuantizingWeights quantizing(CheckpointWeights::open(bf16_dir.path()));
  const auto stored = CheckpointWeights::open(fp8_dir.path());
  for (const auto& [module, shape, rows, cols] :
       std::vector<std::tuple<std::string, std::vector<int64_t>, IndexRange, IndexRange>>{
           {"model.layers.1.mlp.down_proj", {200, 256}, {0, 200}, {128, 256}},
           {"model.layers.0.self_attn.k_proj", {256, 200}, {128, 256}, {0, 200}},
           {"model.layers.0.mlp.gate_proj", {256, 200}, {0, 256}, {0, 200}}}) {
    const Fp8HostBlock a = quantizing.get_fp8_block(module, shape, rows, cols);
    const Fp8HostBlock b = stored->get_fp8_block(module, shape, rows, cols);
    ASSERT_EQ(a.weight.view.shape, b.weight.view.shape) << module;
    ASSERT_EQ(a.scale.view.shape, b.scale.view.shape) << module;
    EXPECT_EQ(std::memcmp(a.weight.view.data, b.weight.view.data, a.weight.view.bytes()), 0) << module;
    EXPECT_EQ(std::memcmp(a.scale.view.data, b.scale.view.data, a.scale.view.bytes()), 0) << module;
  }
}

}  // namespace
}  // namespace nanovllm
