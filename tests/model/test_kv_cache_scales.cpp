// FP8 KV-cache scales as checkpoints store them: read where present (F32 / BF16 scalars of shape [] or [1]),
// 1.0 where absent, refused with the tensor named when they cannot be a scale.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/half_float.h"
#include "model/fp8_quantizing_weights.h"
#include "model/kv_cache_scales.h"
#include "model/safetensors_writer.h"
#include "model/temp_dir.h"

namespace nanovllm {
namespace {

struct ScaleTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  float value;
};

// Scales written into a checkpoint, read back through the checkpoint, or (quantized) through the source that
// quantises its weights as they load, as --quantization fp8 reads a checkpoint.
std::vector<KvCacheScale> load_from(const std::vector<ScaleTensor>& tensors, bool quantized = false) {
  testing::TempDir dir;
  std::vector<TensorRecord> records;
  for (const ScaleTensor& t : tensors) records.push_back({t.name, t.dtype, t.shape});
  write_safetensors(dir / "model.safetensors", records, [&](size_t i, std::vector<std::byte>& out) {
    const ScaleTensor& t = tensors[i];
    for (size_t at = 0; at < out.size(); at += dtype_size(t.dtype)) {
      if (t.dtype == DType::BF16) {
        const uint16_t bits = float_to_bf16(t.value);
        std::memcpy(out.data() + at, &bits, sizeof bits);
      } else if (t.dtype == DType::F32) {
        std::memcpy(out.data() + at, &t.value, sizeof t.value);
      } else {
        std::memset(out.data() + at, 1, dtype_size(t.dtype));
      }
    }
  });
  ModelConfig config;
  config.num_hidden_layers = 2;
  std::unique_ptr<WeightSource> weights = CheckpointWeights::open(dir.path());
  if (quantized) weights = std::make_unique<Fp8QuantizingWeights>(std::move(weights));
  return load_kv_cache_scales(*weights, config);
}

TEST(KvCacheScales, ReadWherePresentOneWhereAbsent) {
  const auto scales = load_from({{"model.layers.0.self_attn.k_scale", DType::F32, {}, 0.25f},
                                 {"model.layers.0.self_attn.v_scale", DType::BF16, {1}, 3.0f},
                                 {"model.layers.1.self_attn.v_scale", DType::F32, {1}, 0.0123f}});
  ASSERT_EQ(scales.size(), 2u);
  EXPECT_EQ(scales[0].k, 0.25f);
  EXPECT_EQ(scales[0].v, 3.0f);
  EXPECT_EQ(scales[1].k, 1.0f);
  EXPECT_EQ(scales[1].v, 0.0123f);
}

TEST(KvCacheScales, ReadThroughWeightsQuantisedAtLoad) {
  const auto scales = load_from({{"model.layers.1.self_attn.k_scale", DType::F32, {}, 0.5f}}, true);
  ASSERT_EQ(scales.size(), 2u);
  EXPECT_EQ(scales[1].k, 0.5f);
  EXPECT_EQ(scales[0].k, 1.0f);
}

TEST(KvCacheScales, RefusesWhatCannotBeAScaleNamingTheTensor) {
  const std::string name = "model.layers.1.self_attn.k_scale";
  const std::vector<ScaleTensor> bad = {{name, DType::F32, {2}, 1.0f},
                                        {name, DType::F32, {1, 1}, 1.0f},
                                        {name, DType::BF16, {}, std::numeric_limits<float>::quiet_NaN()},
                                        {name, DType::F32, {}, 0.0f},
                                        {name, DType::F32, {}, -2.0f},
                                        {name, DType::F32, {}, std::numeric_limits<float>::infinity()}};
  for (const ScaleTensor& t : bad) {
    try {
      load_from({t});
      ADD_FAILURE() << "accepted " << dtype_name(t.dtype) << " value " << t.value;
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace nanovllm
