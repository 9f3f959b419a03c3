#include <gtest/gtest.h>

#include <random>

#include "engine/sequence.h"
#include "test_util.h"

namespace nanovllm {
namespace {

TEST(Sequence, TracksPromptAndCompletion) {
  std::mt19937 rng(11);
  const auto prompt = test::random_tokens(rng, 37);
  Sequence seq(5, prompt, SamplingParams{});
  EXPECT_EQ(seq.seq_id, 5);
  EXPECT_EQ(seq.status, SequenceStatus::Waiting);
  EXPECT_EQ(seq.finish_reason, FinishReason::None);
  EXPECT_EQ(seq.size(), 37);
  EXPECT_EQ(seq.num_prompt_tokens, 37);
  EXPECT_EQ(seq.num_completion_tokens(), 0);
  EXPECT_TRUE(seq.completion_token_ids().empty());
  EXPECT_EQ(seq.last_token(), prompt.back());

  seq.append_token(901);
  seq.append_token(902);
  EXPECT_EQ(seq.size(), 39);
  EXPECT_EQ(seq.num_completion_tokens(), 2);
  ASSERT_EQ(seq.completion_token_ids().size(), 2u);
  EXPECT_EQ(seq.completion_token_ids()[0], 901);
  EXPECT_EQ(seq.completion_token_ids()[1], 902);
  EXPECT_EQ(seq.prompt_token_ids().size(), 37u);
  EXPECT_EQ(seq.last_token(), 902);
}

TEST(Sequence, BlocksAtBoundaries) {
  std::mt19937 rng(12);
  for (int block_size : {16, 256}) {
    for (int length : {1, block_size - 1, block_size, block_size + 1, 3 * block_size + 5}) {
      const auto tokens = test::random_tokens(rng, length);
      Sequence seq(1, tokens, SamplingParams{});
      const int expected_blocks = (length + block_size - 1) / block_size;
      ASSERT_EQ(seq.num_blocks(block_size), expected_blocks) << "length " << length;
      int total = 0;
      for (int i = 0; i < expected_blocks; ++i) {
        const auto block = seq.block_tokens(i, block_size);
        const int expected_size = std::min(block_size, length - i * block_size);
        ASSERT_EQ(static_cast<int>(block.size()), expected_size);
        EXPECT_EQ(block.front(), tokens[i * block_size]);
        EXPECT_EQ(block.back(), tokens[i * block_size + expected_size - 1]);
        total += expected_size;
      }
      EXPECT_EQ(total, length);
      EXPECT_TRUE(seq.block_tokens(expected_blocks, block_size).empty());
    }
  }
}

TEST(Sequence, FinishReasonNames) {
  EXPECT_STREQ(to_string(FinishReason::Stop), "stop");
  EXPECT_STREQ(to_string(FinishReason::Length), "length");
  EXPECT_STREQ(to_string(FinishReason::Abort), "abort");
  EXPECT_STREQ(to_string(FinishReason::None), "");
}

}  // namespace
}  // namespace nanovllm
