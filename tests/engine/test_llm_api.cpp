// The public LLM API beyond generate(): what the engine set up, and chat templates (a model without one).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "nanovllm/llm.h"
#include "support/expect_invalid.h"

namespace nanovllm {
namespace {

// The tiny golden checkpoint's config with random weights: a model without tokenizer files.
EngineConfig tiny_config(int tensor_parallel_size) {
  EngineConfig c;
  c.model = NANOVLLM_CONFIGS_DIR "/golden_tied_gqa2.json";
  c.load_dummy_weights = true;
  c.device = "cpu";
  c.max_model_len = 256;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 256;
  c.kvcache_block_size = 16;
  c.num_kvcache_blocks = 40;
  c.tensor_parallel_size = tensor_parallel_size;
  c.show_progress = false;
  return c;
}

// 3 layers x (K and V) x 16 tokens x 1 KV head x 64 dims x 4 bytes (fp32 on the CPU).
constexpr size_t kBlockBytes = 3 * 2 * 16 * 1 * 64 * 4;

TEST(LlmApi, SummaryTellsWhatTheEngineSetUp) {
  const LLM llm(tiny_config(1));
  const EngineSummary s = llm.summary();
  EXPECT_EQ(s.backend, "cpu");
  EXPECT_EQ(s.num_kvcache_blocks, 40);
  EXPECT_EQ(s.kv_cache_bytes, 40 * kBlockBytes);
  EXPECT_GT(s.weight_bytes, 512u * 128u * 4u);  // the embedding alone
  EXPECT_GT(s.startup_seconds, 0.0);
}

TEST(LlmApi, SummaryCountsEveryRank) {
  const EngineSummary one = LLM(tiny_config(1)).summary();
  const EngineSummary two = LLM(tiny_config(2)).summary();
  EXPECT_EQ(two.backend.rfind("cpu x2 (tensor parallel over ", 0), 0u) << two.backend;
  EXPECT_EQ(two.num_kvcache_blocks, 40);
  // The one KV head is replicated on both ranks; the weights are split, with the norms replicated.
  EXPECT_EQ(two.kv_cache_bytes, 2 * one.kv_cache_bytes);
  EXPECT_GT(two.weight_bytes, one.weight_bytes);
}

// The tiny model with the Qwen3 tokenizer files beside it (NANOVLLM_QWEN3_TOKENIZER_DIR or
// third_party_data/qwen3-tokenizer); an empty path when they are not there.
std::filesystem::path tiny_model_with_tokenizer() {
  namespace fs = std::filesystem;
  const char* env = std::getenv("NANOVLLM_QWEN3_TOKENIZER_DIR");
  const fs::path tokenizer = env ? fs::path(env) : fs::path(NANOVLLM_SOURCE_DIR) / "third_party_data" / "qwen3-tokenizer";
  if (!fs::exists(tokenizer / "tokenizer_config.json")) return {};
  const fs::path dir = fs::temp_directory_path() / ("nanovllm_llm_api_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(NANOVLLM_CONFIGS_DIR "/golden_tied_gqa2.json", dir / "config.json", fs::copy_options::overwrite_existing);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(tokenizer / name, dir / name, fs::copy_options::overwrite_existing);
  return dir;
}

TEST(LlmApi, ChatMessagesRenderThroughTheModelsTemplate) {
  const std::filesystem::path dir = tiny_model_with_tokenizer();
  if (dir.empty()) GTEST_SKIP() << "no Qwen3 tokenizer files (scripts/fetch_tokenizer.sh)";
  EngineConfig config = tiny_config(1);
  config.model = dir.string();
  const LLM llm(config);
  std::filesystem::remove_all(dir);
  const auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(llm.apply_chat_template(messages, nullptr, true, nullptr),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(llm.apply_chat_template(messages, nullptr, false, nullptr), "<|im_start|>user\nhi<|im_end|>\n");
}

TEST(LlmApi, ChatTemplateNeedsOne) {
  const LLM llm(tiny_config(1));
  const auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  testing::expect_invalid([&] { llm.apply_chat_template(messages, nullptr, true, nullptr); }, {"chat template"});
}

}  // namespace
}  // namespace nanovllm
