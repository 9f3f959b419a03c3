// The public LLM API beyond generate(): what the engine set up, and chat templates (a model without one).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "nanovllm/llm.h"
#include "support/expect_invalid.h"
#include "tiny_model.h"

namespace nanovllm {
namespace {

using test::tiny_config;

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

TEST(LlmApi, ChatMessagesRenderThroughTheModelsTemplate) {
  const std::filesystem::path dir = test::tiny_model_with_tokenizer("nanovllm_llm_api");
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
