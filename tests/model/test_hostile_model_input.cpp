// A model folder as hostile input: config.json and safetensors headers that would overflow, wrap, recurse or
// alias, and weights that are not finite. Each must end as one InvalidInput naming the file and the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/error.h"
#include "common/half_float.h"
#include "model/fp8_quantizing_weights.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "model/weight_source.h"
#include "support/expect_invalid.h"
#include "temp_dir.h"

namespace nanovllm {
namespace {

using nlohmann::json;
using testing::expect_invalid;
using testing::TempDir;
using testing::write_file;

const std::string kDeep = std::string(100000, '[') + std::string(100000, ']');

json tiny_config() {
  return json{{"architectures", {"Qwen3ForCausalLM"}},
              {"vocab_size", 64},
              {"hidden_size", 32},
              {"intermediate_size", 48},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 8},
              {"max_position_embeddings", 1024}};
}

// The config text with `field` set to the raw JSON `value` (which may be nothing nlohmann could hold).
std::string config_text_with(const std::string& field, const std::string& value) {
  json j = tiny_config();
  j[field] = "VALUE";
  std::string text = j.dump();
  text.replace(text.find("\"VALUE\""), 7, value);
  return text;
}

void expect_config_file_invalid(const std::string& text, std::initializer_list<std::string> parts) {
  TempDir dir;
  write_file(dir / "config.json", text);
  expect_invalid([&] { ModelConfig::from_dir(dir.path()); }, parts);
}

TEST(HostileConfig, DeepNestingIsRefusedNamingTheFile) {
  expect_config_file_invalid(config_text_with("hidden_act", kDeep), {"config.json: JSON nested deeper than 128"});
}

TEST(HostileConfig, NumberOverflowNamesTheFile) {
  expect_config_file_invalid(config_text_with("rope_theta", "1e999"), {"config.json: number overflow", "1e999"});
}

TEST(HostileConfig, SizesOutOfRangeSayTheRange) {
  json j = tiny_config();
  j["max_position_embeddings"] = int64_t{1} << 40;
  expect_invalid(
      [&] { ModelConfig::from_json(j, nullptr); },
      {"config.json: field 'max_position_embeddings' must be an integer in [1, 1073741824], got 1099511627776"});
  j = tiny_config();
  j["vocab_size"] = 4294967296 + 64;  // would wrap to 64
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"'vocab_size'", "got 4294967360"});
  j = tiny_config();
  j["num_hidden_layers"] = 1 << 30;
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"'num_hidden_layers' must be an integer in [1, 4096]"});
}

TEST(HostileConfig, ProductsThatOverflowAreRefusedBeforeAnyAllocation) {
  json j = tiny_config();
  j["num_attention_heads"] = 1 << 20;
  j["num_key_value_heads"] = 1 << 20;
  j["head_dim"] = 1 << 20;  // q_size would be 2^40 as an int
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"num_attention_heads x head_dim"});
  j = tiny_config();
  j["vocab_size"] = 1 << 30;
  j["hidden_size"] = 1 << 30;
  j["head_dim"] = 8;
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"more than 1099511627776 parameters"});
}

TEST(HostileConfig, EpsMustBeFiniteAsAFloat) {
  json j = tiny_config();
  j["rms_norm_eps"] = 1e300;  // a double, but inf as the float the kernels use
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); },
                 {"config.json: field 'rms_norm_eps' must be a finite number"});
  j["rms_norm_eps"] = 1e-5;
  EXPECT_FLOAT_EQ(ModelConfig::from_json(j, nullptr).rms_norm_eps, 1e-5f);
  j["rope_theta"] = -1.0;
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"must be positive"});
}

TEST(HostileConfig, TokenIdsThatWouldWrapAreRefused) {
  json j = tiny_config();
  j["eos_token_id"] = {1, 4294967297};
  expect_invalid([&] { ModelConfig::from_json(j, nullptr); }, {"config.json: field 'eos_token_id'", "got 4294967297"});
}

TEST(HostileConfig, MessagesQuoteAnExcerptWithControlCharactersEscaped) {
  json j = tiny_config();
  j["hidden_act"] = std::string("\x1b[2J") + std::string(20000, 'x');
  try {
    ModelConfig::from_json(j, nullptr);
    FAIL();
  } catch (const InvalidInput& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("hidden_act \"\\u001b[2Jxxx"), std::string::npos) << message;
    EXPECT_LT(message.size(), 250u) << message;
  }
}

// A .safetensors file: length, header (padded to 8 bytes unless `pad` is false), data.
std::string safetensors_file(const std::string& header, const std::string& data, bool pad = true) {
  std::string h = header;
  if (pad) h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

void expect_header_invalid(const std::string& header, const std::string& data,
                           std::initializer_list<std::string> parts) {
  TempDir dir;
  write_file(dir / "w.safetensors", safetensors_file(header, data));
  expect_invalid([&] { SafetensorsFile::open(dir / "w.safetensors"); }, parts);
}

TEST(HostileSafetensors, ShapeWhoseProductWrapsIsRefused) {
  // 2^32 x 2^32 wraps to 0 in 64 bits, which matched data_offsets [0, 0].
  expect_header_invalid(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "",
                        {"w.safetensors: tensor 'a' has shape [4294967296,4294967296] with more than 2^40 elements"});
  expect_header_invalid(R"({"a":{"dtype":"F32","shape":[65536,65536,65536,65536,0],"data_offsets":[0,0]}})", "",
                        {"more than 2^40 elements"});
}

TEST(HostileSafetensors, OverlappingDataAndRepeatedNamesAreRefused) {
  expect_header_invalid(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        std::string(12, '\0'), {"tensors 'a' and 'b' overlap in data_offsets"});
  expect_header_invalid(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                        std::string(8, '\0'), {"w.safetensors: bad header: key 'a' appears twice"});
  // Empty tensors take no bytes and overlap nothing; adjacent ranges are fine.
  TempDir dir;
  write_file(dir / "ok.safetensors", safetensors_file(R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                                      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                                      std::string(8, '\0')));
  EXPECT_EQ(SafetensorsFile::open(dir / "ok.safetensors").names().size(), 3u);
}

TEST(HostileSafetensors, DeepNestingInTheHeaderIsRefused) {
  expect_header_invalid(R"({"a":{"dtype":"F32","shape":)" + kDeep + R"(,"data_offsets":[0,4]}})", "abcd",
                        {"w.safetensors: bad header: JSON nested deeper than 128 levels"});
  expect_header_invalid(R"({"a":)" + kDeep + "}", "", {"nested deeper"});
}

TEST(HostileSafetensors, RawHeaderBytesAreEscapedInMessages) {
  TempDir dir;
  write_file(dir / "w.safetensors",
             safetensors_file("{\"a\x1b[31m\xff\":{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd"));
  try {
    SafetensorsFile::open(dir / "w.safetensors");
    FAIL();
  } catch (const InvalidInput& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("malformed JSON"), std::string::npos) << message;
    for (const char c : message) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << message;
  }
  expect_header_invalid(R"({"a\u001b[2J":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "a",
                        {"tensor 'a\\x1b[2J' has dtype 'I8'"});
}

// A checkpoint folder holding "w" of shape [3] in BF16, its header length odd so the data is misaligned.
struct LoadedTensor {
  std::unique_ptr<CheckpointWeights> source;  // the view lives as long as its source
  HostTensor tensor;
};
LoadedTensor load_odd_header_tensor(const TempDir& dir, const std::string& bf16_bytes) {
  write_file(dir / "model.safetensors",
             safetensors_file(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}})", bf16_bytes, false));
  LoadedTensor loaded{CheckpointWeights::open(dir.path()), {}};
  loaded.tensor = loaded.source->get("w", {3});
  return loaded;
}

std::string bf16_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) {
    const uint16_t bits = float_to_bf16(v);
    out.append(reinterpret_cast<const char*>(&bits), 2);
  }
  return out;
}

TEST(HostileWeights, MisalignedTensorsAreHandedOutAligned) {
  TempDir dir;
  const LoadedTensor loaded = load_odd_header_tensor(dir, bf16_bytes({1.0f, -2.0f, 0.5f}));
  const HostTensor& t = loaded.tensor;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.view.data) % 2, 0u);
  ASSERT_TRUE(t.owned);  // copied, since the header left it at an odd address
  const auto* values = static_cast<const uint16_t*>(t.view.data);
  EXPECT_EQ(bf16_to_float(values[1]), -2.0f);
}

TEST(HostileWeights, NonFiniteValuesAreRefusedAtLoadNamingTheTensor) {
  TempDir dir;
  expect_invalid(
      [&] {
        load_odd_header_tensor(dir, bf16_bytes({1.0f, std::nanf(""), 0.5f}));
      },
      {"model.safetensors: tensor 'w' holds a non-finite value (NaN or Inf) at element 1"});
  expect_invalid(
      [&] {
        load_odd_header_tensor(dir, bf16_bytes({std::numeric_limits<float>::infinity(), 0, 0}));
      },
      {"tensor 'w' holds a non-finite value", "element 0"});
}

json with_quantization(const json& quantization_config) {
  json j = tiny_config();
  j["quantization_config"] = quantization_config;
  return j;
}

json qwen_fp8() {
  return json{
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
}

TEST(HostileFp8Config, WhatIsNotQwensFp8IsRefusedNamingTheValue) {
  const auto refused = [](const json& quantization_config, std::initializer_list<std::string> parts) {
    expect_invalid([&] { ModelConfig::from_json(with_quantization(quantization_config), nullptr); }, parts);
  };
  json q = qwen_fp8();
  q["quant_method"] = "awq";
  refused(q, {"config.json: quantization_config: quantization method 'awq' is not supported (supported: fp8)"});
  q["quant_method"] = "gptq";
  refused(q, {"quantization method 'gptq' is not supported (supported: fp8)"});
  q = qwen_fp8();
  q.erase("quant_method");
  refused(q, {"field 'quant_method' is missing"});
  q = qwen_fp8();
  q["fmt"] = "e5m2";
  refused(q, {"quantization_config: fmt 'e5m2' is not supported (supported: e4m3)"});
  q = qwen_fp8();
  q["activation_scheme"] = "static";
  refused(q, {"activation_scheme 'static' is not supported (supported: dynamic)"});
  q = qwen_fp8();
  q["weight_block_size"] = {64, 64};
  refused(q, {"weight_block_size [64,64] is not supported (supported: [128, 128])"});
  q.erase("weight_block_size");
  refused(q, {"weight_block_size is missing: per-tensor FP8 scales are not supported"});
  q = qwen_fp8();
  q["modules_to_not_convert"] = "lm_head";
  refused(q, {"field 'modules_to_not_convert' must be a list of module names"});
  refused(json("fp8"), {"quantization_config: must be an object, got \"fp8\""});
  EXPECT_TRUE(ModelConfig::from_json(with_quantization(qwen_fp8()), nullptr).quantization.fp8());
}

// A checkpoint folder with the F8_E4M3 weight "m.weight" [2, 3] (codes of 1.0) and, when `scale_entry` is not
// empty, "m.weight_scale_inv" with that header entry (data_offsets [6, 6 + scale bytes]) and bytes.
void write_fp8_checkpoint(const TempDir& dir, const std::string& scale_entry, const std::string& scale_bytes) {
  std::string header = R"({"m.weight":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,6]})";
  if (!scale_entry.empty()) header += R"(,"m.weight_scale_inv":)" + scale_entry;
  write_file(dir / "model.safetensors", safetensors_file(header + "}", std::string(6, '\x38') + scale_bytes));
}

std::string f32_bytes(float value) { return std::string(reinterpret_cast<const char*>(&value), 4); }

void expect_fp8_block_invalid(const std::string& scale_entry, const std::string& scale_bytes,
                              std::initializer_list<std::string> parts) {
  TempDir dir;
  write_fp8_checkpoint(dir, scale_entry, scale_bytes);
  const auto weights = CheckpointWeights::open(dir.path());
  expect_invalid([&] { weights->get_fp8_block("m", {2, 3}, {0, 2}, {0, 3}); }, parts);
}

TEST(HostileFp8Weights, BadScalesAreRefusedNamingTheTensor) {
  const std::string f32_entry = R"({"dtype":"F32","shape":[1,1],"data_offsets":[6,10]})";
  {
    TempDir dir;
    write_fp8_checkpoint(dir, f32_entry, f32_bytes(0.5f));
    const Fp8HostBlock block = CheckpointWeights::open(dir.path())->get_fp8_block("m", {2, 3}, {0, 2}, {0, 3});
    EXPECT_EQ(*static_cast<const float*>(block.scale.view.data), 0.5f);
  }
  expect_fp8_block_invalid("", "", {"tensor 'm.weight' is F8_E4M3 but its scale 'm.weight_scale_inv' is missing"});
  expect_fp8_block_invalid(R"({"dtype":"F32","shape":[1,2],"data_offsets":[6,14]})", f32_bytes(1) + f32_bytes(1),
                           {"tensor 'm.weight_scale_inv' has shape [1, 2], expected [1, 1]"});
  expect_fp8_block_invalid(R"({"dtype":"F16","shape":[1,1],"data_offsets":[6,8]})", std::string("\x00\x3c", 2),
                           {"tensor 'm.weight_scale_inv' is F16, expected F32 or BF16 block scales"});
  expect_fp8_block_invalid(
      f32_entry, f32_bytes(0.0f),
      {"tensor 'm.weight_scale_inv' holds the scale 0.000000 at element 0", "scales must be finite and positive"});
  expect_fp8_block_invalid(f32_entry, f32_bytes(-2.0f), {"holds the scale -2.000000"});
  expect_fp8_block_invalid(f32_entry, f32_bytes(std::numeric_limits<float>::infinity()),
                           {"tensor 'm.weight_scale_inv' holds a non-finite value"});
  expect_fp8_block_invalid(R"({"dtype":"BF16","shape":[1,1],"data_offsets":[6,8]})", bf16_bytes({std::nanf("")}),
                           {"tensor 'm.weight_scale_inv' holds a non-finite value"});
}

TEST(HostileFp8Weights, BlocksThatCutScaleBlocksAndWrongDtypesAreRefused) {
  TempDir dir;
  write_file(dir / "model.safetensors",
             safetensors_file(R"({"w.weight":{"dtype":"BF16","shape":[200,3],"data_offsets":[0,1200]}})",
                              bf16_bytes({}) + std::string(1200, '\x01')));
  const auto weights = CheckpointWeights::open(dir.path());
  expect_invalid(
      [&] {
        weights->get_fp8_block("w", {200, 3}, {0, 200}, {0, 3});
      },
      {"tensor 'w.weight' is BF16, but config.json's quantization_config (fp8) makes it an F8_E4M3 weight"});
  expect_invalid(
      [&] {
        weights->get_fp8_block("w", {200, 3}, {0, 100}, {0, 3});
      },
      {"FP8 weight 'w.weight' [200, 3]: the block of rows [0, 100) x columns [0, 3) cuts its 128 x 128 "
       "scale blocks"});
  Fp8QuantizingWeights quantizing(CheckpointWeights::open(dir.path()));
  EXPECT_EQ(quantizing.get_fp8_block("w", {200, 3}, {128, 200}, {0, 3}).scale.view.shape, (std::vector<int64_t>{1, 1}));
  expect_invalid([&] { quantizing.get_fp8_block("w", {200, 3}, {100, 200}, {0, 3}); }, {"cuts its 128 x 128"});
  TempDir fp8;
  write_fp8_checkpoint(fp8, "", "");
  Fp8QuantizingWeights requantizing(CheckpointWeights::open(fp8.path()));
  expect_invalid(
      [&] {
        requantizing.get_fp8_block("m", {2, 3}, {0, 2}, {0, 3});
      },
      {"tensor 'm.weight' is F8_E4M3, but config.json has no fp8 quantization_config"});
}

}  // namespace
}  // namespace nanovllm
