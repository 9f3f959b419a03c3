#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "common/half_float.h"
#include "model/checkpoint_writer.h"
#include "model/parameter_layout.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "model/weight_source.h"
#include "support/expect_invalid.h"
#include "support/float_bits.h"
#include "temp_dir.h"

namespace nanovllm {
namespace {

using nlohmann::json;
using testing::expect_invalid;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

// A safetensors file from a header text (padded with spaces to 8 bytes, as the format asks) and data bytes;
// header_len overrides the length field.
std::string safetensors_bytes(std::string header, const std::string& data, int64_t header_len = -1) {
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t len = header_len < 0 ? header.size() : static_cast<uint64_t>(header_len);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + header + data;
}

json small_config(bool tied, bool sharded_shape = false) {
  json j = {{"architectures", {"Qwen3ForCausalLM"}},
            {"vocab_size", sharded_shape ? 301 : 97},
            {"hidden_size", 48},
            {"intermediate_size", 80},
            {"num_hidden_layers", 3},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", 16},
            {"tie_word_embeddings", tied},
            {"eos_token_id", 5}};
  return j;
}

TEST(Safetensors, RoundTripOfWrittenCheckpoint) {
  for (DType dtype : {DType::BF16, DType::F32}) {
    TempDir dir;
    RandomCheckpointOptions options;
    options.config = small_config(false);
    options.seed = 77;
    options.dtype = dtype;
    write_random_checkpoint(options, dir.path());
    const ModelConfig config = ModelConfig::from_dir(dir.path());
    EXPECT_EQ(config.torch_dtype, dtype);
    EXPECT_EQ(config.eos_token_ids, std::vector<int32_t>{5});

    const CheckpointReader reader = CheckpointReader::open(dir.path());
    const auto layout = parameter_layout(config);
    EXPECT_EQ(reader.names().size(), layout.size());
    EXPECT_TRUE(reader.contains("lm_head.weight"));
    for (const ParameterSpec& spec : layout) {
      const HostTensorView view = reader.get(spec.name);
      ASSERT_EQ(view.shape, spec.shape) << spec.name;
      ASSERT_EQ(view.dtype, dtype);
      std::vector<uint16_t> expected(static_cast<size_t>(view.numel()));
      fill_dummy_bf16(spec, 77, DummyWeightScales{}, expected.data());
      for (int64_t i = 0; i < view.numel(); ++i) {
        float value;
        if (dtype == DType::BF16) value = bf16_to_float(static_cast<const uint16_t*>(view.data)[i]);
        else value = static_cast<const float*>(view.data)[i];
        ASSERT_EQ(value, bf16_to_float(expected[static_cast<size_t>(i)])) << spec.name << " element " << i;
      }
    }
    // The header says format pt, which transformers checks for.
    EXPECT_EQ(reader.files().at(0).metadata().at("format"), "pt");
  }
}

TEST(Safetensors, ReadsHandWrittenFileAndSkipsMetadata) {
  TempDir dir;
  const float values[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.5f, 7.0f};
  std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  data += std::string("\x80\x3f\x00\x40", 4);  // BF16 1.0, 2.0
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},"c":{"dtype":"F16","shape":[0],"data_offsets":[28,28]}})";
  write_file(dir / "x.safetensors", safetensors_bytes(header, data));
  const SafetensorsFile file = SafetensorsFile::open(dir / "x.safetensors");
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a", "b", "c"}));
  const HostTensorView a = file.get("a");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.numel(), 6);
  EXPECT_EQ(a.shape_string(), "[2, 3]");
  EXPECT_EQ(testing::float_bits(a.data, 6), testing::float_bits(values, 6));
  const HostTensorView b = file.get("b");
  EXPECT_EQ(b.dtype, DType::BF16);
  EXPECT_EQ(bf16_to_float(static_cast<const uint16_t*>(b.data)[1]), 2.0f);
  EXPECT_EQ(file.get("c").numel(), 0);
  EXPECT_FALSE(file.contains("__metadata__"));
  expect_invalid([&] { file.get("d"); }, {"x.safetensors", "has no tensor 'd'"});
}

TEST(Safetensors, RejectsBadHeaderLength) {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  write_file(dir / "long.safetensors", safetensors_bytes(header, "abcd", 4096));
  expect_invalid([&] { SafetensorsFile::open(dir / "long.safetensors"); }, {"long.safetensors", "bad header"});
  write_file(dir / "absurd.safetensors", safetensors_bytes(header, "abcd", int64_t{1} << 40));
  expect_invalid([&] { SafetensorsFile::open(dir / "absurd.safetensors"); }, {"bad header"});
  write_file(dir / "tiny.safetensors", "abc");
  expect_invalid([&] { SafetensorsFile::open(dir / "tiny.safetensors"); }, {"bad header"});
  write_file(dir / "empty.safetensors", "");
  expect_invalid([&] { SafetensorsFile::open(dir / "empty.safetensors"); }, {"bad header"});
}

TEST(Safetensors, RejectsMalformedHeaderJson) {
  TempDir dir;
  write_file(dir / "m.safetensors", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],)", "abcd"));
  expect_invalid([&] { SafetensorsFile::open(dir / "m.safetensors"); },
                 {"m.safetensors", "bad header", "malformed JSON"});
  write_file(dir / "n.safetensors", safetensors_bytes(R"([1, 2])", ""));
  expect_invalid([&] { SafetensorsFile::open(dir / "n.safetensors"); }, {"bad header"});
  write_file(dir / "o.safetensors", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1]}})", "abcd"));
  expect_invalid([&] { SafetensorsFile::open(dir / "o.safetensors"); }, {"tensor 'a'", "malformed entry"});
  write_file(dir / "p.safetensors",
             safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"));
  expect_invalid([&] { SafetensorsFile::open(dir / "p.safetensors"); }, {"tensor 'a'", "malformed shape"});
}

TEST(Safetensors, RejectsUnsupportedDtype) {
  TempDir dir;
  write_file(dir / "i.safetensors",
             safetensors_bytes(R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", std::string(16, '\1')));
  expect_invalid([&] { SafetensorsFile::open(dir / "i.safetensors"); },
                 {"i.safetensors", "tensor 'ids'", "'I64'", "not supported"});
}

TEST(Safetensors, RejectsOffsetsInconsistentWithShape) {
  TempDir dir;
  write_file(dir / "s.safetensors",
             safetensors_bytes(R"({"w":{"dtype":"BF16","shape":[3,3],"data_offsets":[0,16]}})", std::string(16, '\1')));
  expect_invalid([&] { SafetensorsFile::open(dir / "s.safetensors"); },
                 {"tensor 'w'", "[3, 3]", "18 bytes", "span 16 bytes"});
  write_file(dir / "r.safetensors",
             safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", std::string(16, '\1')));
  expect_invalid([&] { SafetensorsFile::open(dir / "r.safetensors"); }, {"tensor 'w'", "malformed data_offsets"});
}

TEST(Safetensors, RejectsTruncatedFile) {
  TempDir dir;
  RandomCheckpointOptions options;
  options.config = small_config(true);
  options.seed = 3;
  write_random_checkpoint(options, dir.path());
  const auto path = dir / "model.safetensors";
  const auto full_size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, full_size - 5);
  expect_invalid(
      [&] { SafetensorsFile::open(path); },
      {"model.safetensors: tensor '", "lies past the end of the file (size " + std::to_string(full_size - 5) + ")",
       "the file is truncated"});
  expect_invalid([&] { CheckpointReader::open(dir.path()); }, {"the file is truncated"});
}

TEST(CheckpointReader, MissingTensorAndWrongShape) {
  TempDir dir;
  RandomCheckpointOptions options;
  options.config = small_config(true);
  options.seed = 11;
  write_random_checkpoint(options, dir.path());
  const CheckpointReader reader = CheckpointReader::open(dir.path());
  EXPECT_FALSE(reader.contains("lm_head.weight"));  // tied: only the embedding is stored
  expect_invalid([&] { reader.get("model.layers.3.mlp.up_proj.weight"); },
                 {"checkpoint has no tensor 'model.layers.3.mlp.up_proj.weight'"});

  CheckpointWeights weights(CheckpointReader::open(dir.path()));
  EXPECT_TRUE(weights.contains("model.layers.2.mlp.up_proj.weight"));
  const HostTensor up = weights.get("model.layers.2.mlp.up_proj.weight", {80, 48});
  EXPECT_EQ(up.view.numel(), 80 * 48);
  EXPECT_EQ(up.owned, nullptr);
  expect_invalid(
      [&] {
        weights.get("model.layers.2.mlp.up_proj.weight", {48, 80});
      },
      {"model.safetensors: tensor 'model.layers.2.mlp.up_proj.weight' has shape [80, 48], expected [48, 80]"});
  expect_invalid([&] { weights.get("lm_head.weight", {97, 48}); }, {"checkpoint has no tensor 'lm_head.weight'"});
}

TEST(CheckpointReader, ShardedIndex) {
  TempDir dir;
  RandomCheckpointOptions options;
  options.config = small_config(false, true);
  options.seed = 5;
  options.shards = 3;
  write_random_checkpoint(options, dir.path());
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  const json index = read_json_file(dir / "model.safetensors.index.json");
  const ModelConfig config = ModelConfig::from_dir(dir.path());
  const auto layout = parameter_layout(config);
  EXPECT_EQ(index["weight_map"].size(), layout.size());
  size_t total = 0;
  for (const auto& spec : layout)
    total += 2 * static_cast<size_t>(spec.shape[0] * (spec.shape.size() > 1 ? spec.shape[1] : 1));
  EXPECT_EQ(index["metadata"]["total_size"].get<size_t>(), total);

  const CheckpointReader reader = CheckpointReader::open(dir.path());
  EXPECT_EQ(reader.files().size(), 3u);
  EXPECT_EQ(reader.names().size(), layout.size());
  for (const auto& spec : layout) EXPECT_EQ(reader.get(spec.name).shape, spec.shape);
  EXPECT_EQ(reader.file_of("lm_head.weight").filename(), "model-00003-of-00003.safetensors");

  std::filesystem::remove(dir / "model-00002-of-00003.safetensors");
  expect_invalid([&] { CheckpointReader::open(dir.path()); },
                 {"model.safetensors.index.json", "shard 'model-00002-of-00003.safetensors'", "missing"});
}

TEST(CheckpointReader, IndexNamingATensorItsShardLacks) {
  TempDir dir;
  RandomCheckpointOptions options;
  options.config = small_config(false);
  options.shards = 2;
  write_random_checkpoint(options, dir.path());
  json index = read_json_file(dir / "model.safetensors.index.json");
  index["weight_map"]["model.extra.weight"] = "model-00001-of-00002.safetensors";
  write_file(dir / "model.safetensors.index.json", index.dump());
  expect_invalid([&] { CheckpointReader::open(dir.path()); },
                 {"'model.extra.weight'", "that shard has no such tensor"});
}

TEST(CheckpointReader, FallsBackToEverySafetensorsFile) {
  TempDir dir;
  RandomCheckpointOptions options;
  options.config = small_config(true);
  options.shards = 2;
  write_random_checkpoint(options, dir.path());
  std::filesystem::remove(dir / "model.safetensors.index.json");
  std::filesystem::rename(dir / "model-00001-of-00002.safetensors", dir / "first.safetensors");
  const CheckpointReader reader = CheckpointReader::open(dir.path());
  EXPECT_EQ(reader.files().size(), 2u);
  EXPECT_TRUE(reader.contains("model.embed_tokens.weight"));
  EXPECT_TRUE(reader.contains("model.norm.weight"));
  // The same tensor in two files is an error, not a silent pick.
  std::filesystem::copy_file(dir / "first.safetensors", dir / "second_copy.safetensors");
  expect_invalid([&] { CheckpointReader::open(dir.path()); }, {"appears in both"});
}

TEST(CheckpointReader, NoWeightsOrNoFolder) {
  TempDir dir;
  write_file(dir / "config.json", "{}");
  expect_invalid([&] { CheckpointReader::open(dir.path()); },
                 {"no .safetensors weights in '" + dir.path().string() + "'"});
  expect_invalid([] { CheckpointReader::open("/nonexistent/weights"); },
                 {"model folder '/nonexistent/weights' does not exist"});
}

TEST(SafetensorsWriter, HeaderIsAlignedAndSized) {
  TempDir dir;
  const std::vector<TensorRecord> records = {{"w", DType::F32, {3}}, {"b", DType::BF16, {5}}};
  const size_t size = write_safetensors(dir / "t.safetensors", records, [](size_t i, std::vector<std::byte>& out) {
    for (size_t k = 0; k < out.size(); ++k) out[k] = std::byte(static_cast<uint8_t>(i * 16 + k));
  });
  const std::string bytes = read_file(dir / "t.safetensors");
  EXPECT_EQ(bytes.size(), size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_len + 12 + 10);
  const SafetensorsFile file = SafetensorsFile::open(dir / "t.safetensors");
  EXPECT_EQ(static_cast<const uint8_t*>(file.get("b").data)[3], 16 + 3);
}

}  // namespace
}  // namespace nanovllm
