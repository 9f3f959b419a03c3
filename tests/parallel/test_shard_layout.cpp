// ShardLayout: how the ranks divide Qwen3's heads, MLP and vocabulary (nano-vLLM's Megatron layout, with KV
// heads replicated when there are fewer than ranks).
#include <gtest/gtest.h>

#include "common/error.h"
#include "model/shard_layout.h"

namespace nanovllm {
namespace {

ModelConfig config(int heads, int kv_heads, int intermediate, int vocab) {
  nlohmann::json j = {{"architectures", {"Qwen3ForCausalLM"}}, {"vocab_size", vocab},    {"hidden_size", 128},
                      {"intermediate_size", intermediate},     {"num_hidden_layers", 1}, {"num_attention_heads", heads},
                      {"num_key_value_heads", kv_heads},       {"head_dim", 64}};
  return ModelConfig::from_json(j, nullptr);
}

TEST(ShardLayout, DividesHeadsMlpAndVocabulary) {
  const ModelConfig qwen3_8b = config(32, 8, 12288, 151936);
  for (int size : {1, 2, 4, 8}) {
    int64_t vocab_covered = 0;
    for (int r = 0; r < size; ++r) {
      const ShardLayout s = ShardLayout::of(qwen3_8b, r, size);
      EXPECT_EQ(s.num_heads, 32 / size);
      EXPECT_EQ(s.num_kv_heads, 8 / size);
      EXPECT_EQ(s.kv_head_start, r * 8 / size);
      EXPECT_EQ(s.intermediate, 12288 / size);
      EXPECT_EQ(s.vocab_start, vocab_covered);
      vocab_covered += s.vocab_rows;
    }
    EXPECT_EQ(vocab_covered, 151936);
  }
}

// 701 rows over 4 ranks: chunks of 176, the last rank holds 173 (padded to 176).
TEST(ShardLayout, OddVocabularyGivesAShorterLastChunk) {
  const ModelConfig c = config(4, 2, 160, 701);
  const ShardLayout last = ShardLayout::of(c, 3, 4);
  EXPECT_EQ(last.vocab_chunk, 176);
  EXPECT_EQ(last.vocab_start, 528);
  EXPECT_EQ(last.vocab_rows, 173);
}

// Fewer KV heads than ranks: each rank keeps the one KV head its query heads read (GQA group h / (nh / nkv)).
TEST(ShardLayout, ReplicatesKvHeadsWhenRanksOutnumberThem) {
  const ModelConfig c = config(8, 2, 256, 1000);
  for (int r = 0; r < 4; ++r) {
    const ShardLayout s = ShardLayout::of(c, r, 4);
    EXPECT_EQ(s.num_kv_heads, 1);
    EXPECT_EQ(s.num_heads, 2);
    const int first_query_head = r * s.num_heads;
    EXPECT_EQ(s.kv_head_start, first_query_head / (8 / 2)) << "rank " << r;
  }
}

TEST(ShardLayout, RefusesWhatDoesNotDivide) {
  auto message = [](const ModelConfig& c, int size) {
    try {
      ShardLayout::of(c, 0, size);
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message(config(6, 2, 256, 100), 4),
            "tensor_parallel_size 4 does not divide the model's num_attention_heads (6)");
  EXPECT_EQ(message(config(8, 8, 100, 100), 8),
            "tensor_parallel_size 8 does not divide the model's intermediate_size (100)");
  EXPECT_EQ(message(config(12, 6, 120, 100), 4),
            "tensor_parallel_size 4 does not divide the model's num_key_value_heads (6)");
  EXPECT_EQ(message(config(12, 3, 120, 100), 4),
            "tensor_parallel_size 4 is not a multiple of the model's num_key_value_heads (3), so KV heads cannot be "
            "replicated evenly");
  EXPECT_EQ(message(config(12, 3, 120, 100), 6), "accepted");  // 3 KV heads, each kept by 2 ranks
}

}  // namespace
}  // namespace nanovllm
