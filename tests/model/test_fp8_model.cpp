// The Qwen3 model over block-scaled FP8 weights on the CPU backend: an FP8 checkpoint computes exactly what an
// F32 checkpoint of its dequantised weights computes; weights quantised at load (--quantization fp8) are the FP8
// checkpoint's; tensor parallelism splits them; and every checkpoint the model cannot run is refused at load.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "common/fp8.h"
#include "common/half_float.h"
#include "engine/tiny_model.h"
#include "fp8_test_config.h"
#include "model/checkpoint_writer.h"
#include "model/fp8_block_quantizer.h"
#include "model/qwen3.h"
#include "model/safetensors_writer.h"
#include "nanovllm/llm.h"
#include "support/expect_invalid.h"
#include "temp_dir.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::expect_invalid;
using testing::fp8_friendly_config;
using testing::fp8_quantization_config;
using testing::TempDir;

const std::vector<int32_t> kPrompt = {5, 17, 200, 3, 99, 42, 7, 250, 1, 64, 128, 31};

void write_checkpoint(const fs::path& dir, WeightQuantization::Method method,
                      const json& config = fp8_friendly_config(), DType dtype = DType::BF16) {
  RandomCheckpointOptions options;
  options.config = config;
  options.seed = 11;
  options.dtype = dtype;
  options.quantization = method;
  write_random_checkpoint(options, dir);
}

// Logits [T, V] of kPrompt, prefilled in one step through Qwen3Model on the CPU backend.
std::vector<float> prompt_logits(const fs::path& dir, const std::string& quantization = "") {
  ModelConfig config = ModelConfig::from_dir(dir);
  const bool quantize = apply_quantization_setting(quantization, false, config.quantization);
  const auto weights = open_weights(dir, config, false, 0, quantize);
  CpuBackend backend;
  const int T = static_cast<int>(kPrompt.size()), block_size = 16, blocks = (T + block_size - 1) / block_size;
  Qwen3Model model(config, ShardLayout::of(config, 0, 1), nullptr, backend, *weights, T, T, 64);
  std::vector<int32_t> ids = kPrompt, positions(T), cu = {0, T}, lens = {T}, table(blocks);
  for (int t = 0; t < T; ++t) positions[t] = t;
  for (int b = 0; b < blocks; ++b) table[b] = b;
  StepTensors step;
  step.num_tokens = T;
  step.input_ids = Tensor(ids.data(), DType::I32, {T});
  step.positions = Tensor(positions.data(), DType::I32, {T});
  step.slot_mapping = step.positions;  // one sequence in blocks 0, 1, ...: token t in slot t
  step.attention = {Tensor(cu.data(), DType::I32, {2}),
                    Tensor(lens.data(), DType::I32, {1}),
                    Tensor(table.data(), DType::I32, {1, blocks}),
                    1,
                    T,
                    T,
                    blocks,
                    block_size,
                    false,
                    0};
  const int64_t nkv = config.num_key_value_heads, d = config.head_dim;
  std::vector<std::vector<float>> storage;
  std::vector<KvCacheLayer> cache;
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    KvCacheLayer layer;
    for (Tensor* t : {&layer.k, &layer.v}) {
      storage.emplace_back(static_cast<size_t>(blocks * block_size * nkv * d));
      *t = Tensor(storage.back().data(), DType::F32, {blocks, block_size, nkv, d});
    }
    cache.push_back(layer);
  }
  model.forward(step, cache);
  std::vector<float> logits(static_cast<size_t>(T) * config.vocab_size);
  Tensor out(logits.data(), DType::F32, {T, config.vocab_size});
  model.logits(step.positions, out);
  return logits;
}

// The FP8 checkpoint in `from` as an F32 checkpoint holding its dequantised weights (scales dropped).
void write_dequantized_f32(const fs::path& from, const fs::path& to) {
  ModelConfig config = ModelConfig::from_dir(from);
  const CheckpointReader reader = CheckpointReader::open(from);
  std::vector<TensorRecord> records;
  for (const std::string& name : reader.names())
    if (!name.ends_with(".weight_scale_inv")) records.push_back({name, DType::F32, reader.get(name).shape});
  write_safetensors(to / "model.safetensors", records, [&](size_t i, std::vector<std::byte>& out) {
    const HostTensorView view = reader.get(records[i].name);
    std::vector<float> values(static_cast<size_t>(view.numel()));
    const auto* bytes = static_cast<const uint8_t*>(view.data);
    if (view.dtype == DType::F8_E4M3) {
      const std::string module = records[i].name.substr(0, records[i].name.size() - std::strlen(".weight"));
      const HostTensorView scale = reader.get(module + ".weight_scale_inv");
      const int64_t cols = view.shape[1], scale_cols = scale.shape[1];
      for (size_t e = 0; e < values.size(); ++e) {
        const int64_t r = static_cast<int64_t>(e) / cols, c = static_cast<int64_t>(e) % cols;
        float s;
        std::memcpy(&s, static_cast<const char*>(scale.data) + 4 * ((r / 128) * scale_cols + c / 128), 4);
        values[e] = fp8_e4m3_to_float(bytes[e]) * s;
      }
    } else {
      ASSERT_EQ(view.dtype, DType::BF16);
      for (size_t e = 0; e < values.size(); ++e) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * e, 2);
        values[e] = bf16_to_float(bits);
      }
    }
    std::memcpy(out.data(), values.data(), out.size());
  });
  config.quantization = {};
  config.torch_dtype = DType::F32;
  testing::write_file(to / "config.json", config.to_json().dump());
}

TEST(Fp8Model, LogitsEqualTheDequantisedF32CheckpointsBitForBit) {
  TempDir fp8, f32;
  write_checkpoint(fp8.path(), WeightQuantization::Method::kFp8);
  write_dequantized_f32(fp8.path(), f32.path());
  const std::vector<float> a = prompt_logits(fp8.path()), b = prompt_logits(f32.path());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << i << ": " << a[i] << " vs " << b[i];
}

TEST(Fp8Model, QuantisedAtLoadEqualsTheFp8CheckpointAndIsCloseToBf16) {
  TempDir bf16, fp8;
  write_checkpoint(bf16.path(), WeightQuantization::Method::kNone);
  write_checkpoint(fp8.path(), WeightQuantization::Method::kFp8);
  const std::vector<float> at_load = prompt_logits(bf16.path(), "fp8"), stored = prompt_logits(fp8.path());
  const std::vector<float> exact = prompt_logits(bf16.path());
  EXPECT_EQ(prompt_logits(fp8.path(), "fp8"), stored);  // already FP8: the setting changes nothing
  ASSERT_EQ(at_load, stored);
  // Random weights give logits of a few nats; E4M3 keeps 3 mantissa bits (errors of up to 1/16 per weight,
  // averaging out over the sums), so the logits move by a few percent of their spread.
  double error2 = 0, logit2 = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    error2 += (static_cast<double>(stored[i]) - exact[i]) * (static_cast<double>(stored[i]) - exact[i]);
    logit2 += static_cast<double>(exact[i]) * exact[i];
  }
  EXPECT_GT(error2, 0.0);  // FP8 really is in use
  EXPECT_LT(std::sqrt(error2 / logit2), 0.1);
}

// The engine tests' small CPU settings, on the checkpoint in `dir`.
EngineConfig engine_config(const fs::path& dir, int tensor_parallel_size = 1) {
  EngineConfig c = test::tiny_config(tensor_parallel_size);
  c.model = dir.string();
  c.load_dummy_weights = false;
  return c;
}

std::vector<std::vector<int32_t>> greedy_tokens(EngineConfig config) {
  LLM llm(std::move(config));
  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 12;
  params.ignore_eos = true;
  std::vector<std::vector<int32_t>> out;
  for (const RequestOutput& o : llm.generate({Prompt::from_tokens(kPrompt), Prompt::from_tokens({9, 8, 7})}, params))
    out.push_back(o.token_ids);
  return out;
}

TEST(Fp8Model, EngineGeneratesTheSameTokensFromEitherFp8SourceAndUnderTensorParallelism) {
  TempDir bf16, fp8;
  write_checkpoint(bf16.path(), WeightQuantization::Method::kNone);
  write_checkpoint(fp8.path(), WeightQuantization::Method::kFp8);
  EngineConfig quantized = engine_config(bf16.path());
  quantized.quantization = "fp8";
  const auto stored = greedy_tokens(engine_config(fp8.path()));
  EXPECT_EQ(greedy_tokens(quantized), stored);
  EXPECT_EQ(greedy_tokens(engine_config(fp8.path(), 2)), stored);
  EngineConfig dummy = engine_config(fp8.path() / "config.json");
  dummy.load_dummy_weights = true;  // an FP8 model on random weights quantises them
  EXPECT_EQ(greedy_tokens(dummy).size(), 2u);
}

TEST(Fp8Model, WeightBytesCountOneBytePerFp8Weight) {
  TempDir bf16;
  write_checkpoint(bf16.path(), WeightQuantization::Method::kNone);
  ModelConfig config = ModelConfig::from_dir(bf16.path());
  CpuBackend backend;
  const auto plain_weights = open_weights(bf16.path(), config, false, 0);
  const size_t plain =
      Qwen3Model(config, ShardLayout::of(config, 0, 1), nullptr, backend, *plain_weights, 4, 4, 16).weight_bytes();
  config.quantization.method = WeightQuantization::Method::kFp8;
  const auto fp8_weights = open_weights(bf16.path(), config, false, 0, true);
  const size_t fp8 =
      Qwen3Model(config, ShardLayout::of(config, 0, 1), nullptr, backend, *fp8_weights, 4, 4, 16).weight_bytes();
  // Per layer the linears hold (768 + 512) x 200 + 200 x 256 + 200 x 256 weights: 4 bytes each on the CPU in
  // F32, 1 in FP8, plus 4 bytes per 128 x 128 block (12 + 8 + 4 + 4 blocks).
  const size_t linear_weights = 2 * ((768 + 512) * 200 + 2 * 200 * 256);
  EXPECT_EQ(plain - fp8, linear_weights * 3 - 2 * (12 + 8 + 4 + 4) * 4);
}

// Hands one tensor out as F8_E4M3 codes (all 1.0) in place of what the checkpoint holds.
class Fp8Impostor : public WeightSource {
 public:
  Fp8Impostor(std::unique_ptr<WeightSource> source, std::string name) : source_(std::move(source)), name_(name) {}
  HostTensor get(const std::string& name, const std::vector<int64_t>& shape) override {
    HostTensor t = source_->get(name, shape);
    if (name != name_) return t;
    auto codes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(t.view.numel()), 0x38);
    return HostTensor{HostTensorView{codes->data(), DType::F8_E4M3, shape}, codes};
  }
  bool contains(const std::string& name) const override { return source_->contains(name); }

 private:
  std::unique_ptr<WeightSource> source_;
  std::string name_;
};

void expect_load_refused(const fs::path& dir, const std::string& impostor, std::initializer_list<std::string> parts) {
  const ModelConfig config = ModelConfig::from_dir(dir);
  std::unique_ptr<WeightSource> weights = open_weights(dir, config, false, 0);
  if (!impostor.empty()) weights = std::make_unique<Fp8Impostor>(std::move(weights), impostor);
  CpuBackend backend;
  expect_invalid([&] { Qwen3Model(config, ShardLayout::of(config, 0, 1), nullptr, backend, *weights, 4, 4, 16); },
                 parts);
}

void set_not_converted(const fs::path& dir, const json& modules) {
  json config = read_json_file(dir / "config.json");
  config["quantization_config"]["modules_to_not_convert"] = modules;
  testing::write_file(dir / "config.json", config.dump());
}

TEST(Fp8ModelRefusals, Fp8WhereTheModelWantsFloatsIsNamed) {
  TempDir bf16, fp8;
  write_checkpoint(bf16.path(), WeightQuantization::Method::kNone);
  write_checkpoint(fp8.path(), WeightQuantization::Method::kFp8);
  expect_load_refused(
      fp8.path(), "model.norm.weight",
      {"tensor 'model.norm.weight' is F8_E4M3, but only the decoder layers' linear weights may be FP8"});
  expect_load_refused(fp8.path(), "model.embed_tokens.weight", {"'model.embed_tokens.weight' is F8_E4M3"});
  expect_load_refused(
      bf16.path(), "model.layers.1.mlp.up_proj.weight",
      {"tensor 'model.layers.1.mlp.up_proj.weight' is F8_E4M3, but config.json has no fp8 quantization_config"});
  set_not_converted(fp8.path(), {"self_attn.o_proj"});
  expect_load_refused(fp8.path(), "",
                      {"tensor 'model.layers.0.self_attn.o_proj.weight' is F8_E4M3, but quantization_config's "
                       "modules_to_not_convert keeps it unquantised"});
  set_not_converted(fp8.path(), {"model.layers.1.mlp.gate_proj"});
  expect_load_refused(
      fp8.path(), "",
      {"modules_to_not_convert lists only some of the linears fused with 'model.layers.1.mlp.gate_proj'"});
}

TEST(Fp8ModelRefusals, FloatWeightsInAnFp8CheckpointAreNamed) {
  TempDir bf16;
  write_checkpoint(bf16.path(), WeightQuantization::Method::kNone);
  json config = read_json_file(bf16 / "config.json");
  config["quantization_config"] = fp8_quantization_config();
  testing::write_file(bf16 / "config.json", config.dump());
  expect_load_refused(bf16.path(), "",
                      {"tensor 'model.layers.0.self_attn.q_proj.weight' is BF16, but config.json's "
                       "quantization_config (fp8) makes it an F8_E4M3 weight"});
}

TEST(Fp8ModelRefusals, ModulesToNotConvertStayUnquantised) {
  TempDir all, some;
  write_checkpoint(all.path(), WeightQuantization::Method::kFp8);
  json config = fp8_friendly_config();
  config["quantization_config"] = fp8_quantization_config();
  config["quantization_config"]["modules_to_not_convert"] = {"lm_head", "mlp.down_proj"};
  write_checkpoint(some.path(), WeightQuantization::Method::kNone, config);
  const CheckpointReader reader = CheckpointReader::open(some.path());
  EXPECT_EQ(reader.get("model.layers.0.mlp.down_proj.weight").dtype, DType::BF16);
  EXPECT_EQ(reader.get("model.layers.0.mlp.up_proj.weight").dtype, DType::F8_E4M3);
  const std::vector<float> a = prompt_logits(all.path()), b = prompt_logits(some.path());
  EXPECT_NE(a, b);  // the BF16 down_proj is used as it is
}

TEST(Fp8ModelRefusals, ShardsThatCutScaleBlocksAreRefusedWithTheShapes) {
  TempDir dir;
  json config = fp8_friendly_config();
  config["intermediate_size"] = 384;  // 192 rows per rank under tensor parallelism 2
  write_checkpoint(dir.path(), WeightQuantization::Method::kFp8, config);
  expect_invalid(
      [&] { LLM llm(engine_config(dir.path(), 2)); },
      {"FP8 weight 'model.layers.0.mlp.gate_proj.weight' [384, 200]: its 192 rows (of this rank)", "multiple of 128"});
  EXPECT_NO_THROW(LLM llm(engine_config(dir.path(), 1)));
}

// A backend with no FP8 linear; no op of it may run, since the model must refuse before loading anything.
class NoFp8Backend final : public Backend {
 public:
  std::string name() const override { return "test"; }
  DType compute_dtype() const override { return DType::BF16; }
  Buffer allocate(size_t) override { throw EngineError("allocate"); }
  void upload(const void*, void*, size_t) override { throw EngineError("upload"); }
  Buffer allocate_host(size_t) override { throw EngineError("allocate_host"); }
  void upload_async(const void*, void*, size_t) override { throw EngineError("upload_async"); }
  void download(const void*, void*, size_t) override { throw EngineError("download"); }
  void download_async(const void*, void*, size_t) override { throw EngineError("download_async"); }
  void upload_ranges(const void*, void*, std::span<const CopyRange>, const DeviceIdSource&) override {
    throw EngineError("upload_ranges");
  }
  std::unique_ptr<QueueMark> create_mark() override { throw EngineError("create_mark"); }
  void synchronize() override {}
  void upload_converted(const void*, DType, void*, int64_t) override { throw EngineError("upload_converted"); }
  bool is_device() const override { return true; }
  std::string device_name() const override { return "test"; }
  void embedding(const Tensor&, const Tensor&, int64_t, Tensor&) override { throw EngineError("op"); }
  void rms_norm(const Tensor&, const Tensor&, float, Tensor&) override { throw EngineError("op"); }
  void add_rms_norm(const Tensor&, Tensor&, const Tensor&, float, Tensor&) override { throw EngineError("op"); }
  void linear(const Tensor&, const Tensor&, const Tensor&, Tensor&) override { throw EngineError("op"); }
  void qk_norm_rope_cache(const Tensor&, const Tensor&, const Tensor&, float, const Tensor&, const Tensor&,
                          const Tensor&, int, int, int, KvCacheLayer&, Tensor&) override {
    throw EngineError("op");
  }
  void paged_attention(const Tensor&, const KvCacheLayer&, const AttentionBatch&, int, int, int, float,
                       Tensor&) override {
    throw EngineError("op");
  }
  void silu_and_mul(const Tensor&, Tensor&) override { throw EngineError("op"); }
  void gather_rows(const Tensor&, const Tensor&, Tensor&) override { throw EngineError("op"); }
  void concat_column_chunks(const Tensor&, Tensor&) override { throw EngineError("op"); }
  void set_logits(Tensor&, const Tensor&, const Tensor&, float) override { throw EngineError("op"); }
  void sample(const Tensor&, const SamplerInputs&, Tensor&) override { throw EngineError("op"); }
  void sample_shard(const Tensor&, int64_t, int64_t, const SamplerInputs&, Tensor&, Tensor&) override {
    throw EngineError("op");
  }
  void logprobs(const Tensor&, const Tensor&, int, Tensor&, Tensor&, Tensor&) override { throw EngineError("op"); }
};

TEST(Fp8ModelRefusals, ABackendWithoutFp8IsRefusedBeforeLoading) {
  TempDir fp8;
  write_checkpoint(fp8.path(), WeightQuantization::Method::kFp8);
  const ModelConfig config = ModelConfig::from_dir(fp8.path());
  const auto weights = open_weights(fp8.path(), config, false, 0);
  NoFp8Backend backend;
  EXPECT_FALSE(backend.supports_fp8_weights());
  Tensor out;
  EXPECT_THROW(backend.linear_fp8(Tensor(), Tensor(), Tensor(), Tensor(), out), EngineError);
  expect_invalid([&] { Qwen3Model(config, ShardLayout::of(config, 0, 1), nullptr, backend, *weights, 4, 4, 16); },
                 {"FP8 weights are not supported by the test backend yet"});
}

}  // namespace
}  // namespace nanovllm
