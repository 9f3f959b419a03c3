#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/error.h"
#include "engine/block_manager.h"
#include "test_util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace nanovllm {
namespace {

using test::concat;
using test::random_tokens;

// What the model runner does after computing a whole prefill: all tokens' KV is now in the cache.
void compute_all(BlockManager& manager, Sequence& seq) {
  seq.num_computed_tokens = seq.size();
  manager.commit_computed_blocks(seq);
}

Sequence make_seq(int64_t id, std::vector<int32_t> tokens) { return Sequence(id, std::move(tokens), SamplingParams{}); }

TEST(BlockManager, HashIsXxh64OfLittleEndianTokensChainedBySeed) {
  std::mt19937 rng(1);
  const auto tokens = random_tokens(rng, 16);
  std::vector<unsigned char> bytes;
  for (int32_t t : tokens) {
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<unsigned char>(static_cast<uint32_t>(t) >> (8 * b)));
  }
  const uint64_t first = BlockManager::hash_block(tokens, 0);
  EXPECT_EQ(first, XXH64(bytes.data(), bytes.size(), 0));
  EXPECT_EQ(BlockManager::hash_block(tokens, first), XXH64(bytes.data(), bytes.size(), first));
  EXPECT_NE(BlockManager::hash_block(tokens, first), first);  // the chain changes the hash
}

TEST(BlockManager, AllocateAndFreeCounts) {
  std::mt19937 rng(2);
  BlockManager manager(10, 16, true);
  EXPECT_EQ(manager.num_free_blocks(), 10);
  EXPECT_EQ(manager.num_blocks(), 10);
  EXPECT_EQ(manager.block_size(), 16);

  Sequence a = make_seq(1, random_tokens(rng, 33));  // 3 blocks
  ASSERT_TRUE(manager.can_allocate(a));
  manager.allocate(a);
  EXPECT_EQ(a.block_table.size(), 3u);
  EXPECT_EQ(manager.num_free_blocks(), 7);
  EXPECT_EQ(a.num_cached_tokens, 0);
  EXPECT_EQ(a.num_computed_tokens, 0);
  std::set<int32_t> distinct(a.block_table.begin(), a.block_table.end());
  EXPECT_EQ(distinct.size(), 3u);
  for (int32_t id : a.block_table) EXPECT_EQ(manager.ref_count(id), 1);

  Sequence b = make_seq(2, random_tokens(rng, 7 * 16));  // 7 blocks: exactly what is left
  ASSERT_TRUE(manager.can_allocate(b));
  manager.allocate(b);
  EXPECT_EQ(manager.num_free_blocks(), 0);
  Sequence c = make_seq(3, random_tokens(rng, 1));
  EXPECT_FALSE(manager.can_allocate(c));
  EXPECT_THROW(manager.allocate(c), EngineError);
  EXPECT_TRUE(c.block_table.empty());

  compute_all(manager, a);
  manager.deallocate(a);
  EXPECT_TRUE(a.block_table.empty());
  EXPECT_EQ(a.num_computed_tokens, 0);
  EXPECT_EQ(a.num_cached_tokens, 0);
  EXPECT_EQ(manager.num_free_blocks(), 3);
  manager.deallocate(b);
  EXPECT_EQ(manager.num_free_blocks(), 10);
}

// Lengths around one block, for the default block size and the smallest one.
class BlockManagerLengths : public ::testing::TestWithParam<int> {};

TEST_P(BlockManagerLengths, BlocksAndPrefixHitsAroundBoundaries) {
  const int block_size = GetParam();
  std::mt19937 rng(3 + block_size);
  for (int length : {255, 256, 257}) {
    BlockManager manager(64, block_size, true);
    const auto tokens = random_tokens(rng, length);
    Sequence a = make_seq(1, tokens);
    manager.allocate(a);
    const int blocks = (length + block_size - 1) / block_size;
    ASSERT_EQ(static_cast<int>(a.block_table.size()), blocks) << length;
    EXPECT_EQ(manager.num_free_blocks(), 64 - blocks);
    compute_all(manager, a);

    // The same tokens again: every full block hits, except that a fully cached sequence recomputes its last.
    Sequence b = make_seq(2, tokens);
    manager.allocate(b);
    const int full_blocks = length / block_size;
    const int expected_hits = (length % block_size == 0) ? full_blocks - 1 : full_blocks;
    EXPECT_EQ(b.num_cached_tokens, expected_hits * block_size) << "length " << length;
    EXPECT_EQ(b.num_computed_tokens, b.num_cached_tokens);
    EXPECT_LT(b.num_computed_tokens, b.size());
    for (int i = 0; i < blocks; ++i) {
      if (i < expected_hits) {
        EXPECT_EQ(b.block_table[i], a.block_table[i]);
        EXPECT_EQ(manager.ref_count(a.block_table[i]), 2);
      } else {
        EXPECT_NE(b.block_table[i], a.block_table[i]);
        EXPECT_EQ(manager.ref_count(b.block_table[i]), 1);
      }
    }
    EXPECT_EQ(manager.num_free_blocks(), 64 - blocks - (blocks - expected_hits));
    manager.deallocate(a);
    manager.deallocate(b);
    EXPECT_EQ(manager.num_free_blocks(), 64);
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, BlockManagerLengths, ::testing::Values(16, 256));

TEST(BlockManager, SharedPrefixLongerThanABlockDivergingMidBlock) {
  std::mt19937 rng(4);
  BlockManager manager(20, 16, true);
  const auto a_tokens = random_tokens(rng, 45);
  Sequence a = make_seq(1, a_tokens);
  manager.allocate(a);
  compute_all(manager, a);

  // Shares 37 tokens: blocks 0 and 1 fully, then diverges in the middle of block 2.
  auto b_tokens = std::vector<int32_t>(a_tokens.begin(), a_tokens.begin() + 37);
  b_tokens = concat(b_tokens, random_tokens(rng, 20));
  Sequence b = make_seq(2, b_tokens);
  const int free_before = manager.num_free_blocks();
  manager.allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 32);
  EXPECT_EQ(b.block_table[0], a.block_table[0]);
  EXPECT_EQ(b.block_table[1], a.block_table[1]);
  EXPECT_NE(b.block_table[2], a.block_table[2]);
  EXPECT_EQ(manager.num_free_blocks(), free_before - 2);  // 4 blocks, 2 of them shared
  EXPECT_EQ(manager.ref_count(a.block_table[0]), 2);
  EXPECT_EQ(manager.ref_count(a.block_table[2]), 1);
  EXPECT_EQ(manager.num_prefix_queried_tokens(), 45 + 57);
  EXPECT_EQ(manager.num_prefix_hit_tokens(), 32);
}

TEST(BlockManager, PrefixStatsCountNothingWithCachingOff) {
  std::mt19937 rng(4);
  BlockManager manager(20, 16, false);
  const auto tokens = random_tokens(rng, 40);
  Sequence a = make_seq(1, tokens), b = make_seq(2, tokens);
  manager.allocate(a);
  compute_all(manager, a);
  manager.allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 0);
  EXPECT_EQ(manager.num_prefix_queried_tokens(), 0);
  EXPECT_EQ(manager.num_prefix_hit_tokens(), 0);
}

TEST(BlockManager, DivergenceInTheFirstBlockMisses) {
  std::mt19937 rng(5);
  BlockManager manager(20, 16, true);
  const auto a_tokens = random_tokens(rng, 48);
  Sequence a = make_seq(1, a_tokens);
  manager.allocate(a);
  compute_all(manager, a);
  auto b_tokens = a_tokens;
  b_tokens[7] += 1;  // one token differs: every later block differs by the chain too
  Sequence b = make_seq(2, b_tokens);
  manager.allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 0);
  for (int i = 0; i < 3; ++i) EXPECT_NE(b.block_table[i], a.block_table[i]);
}

TEST(BlockManager, HashCollisionIsAMissAfterTokenComparison) {
  std::mt19937 rng(6);
  // Every block hashes to the same value: only the token comparison can tell blocks apart.
  BlockManager manager(20, 16, true, [](std::span<const int32_t>, uint64_t) { return uint64_t{42}; });
  const auto a_tokens = random_tokens(rng, 20);
  Sequence a = make_seq(1, a_tokens);
  manager.allocate(a);
  compute_all(manager, a);  // registers block 0 under hash 42
  ASSERT_TRUE(manager.is_registered(a.block_table[0]));

  Sequence b = make_seq(2, random_tokens(rng, 20));  // same hash, other tokens
  ASSERT_TRUE(manager.can_allocate(b));
  manager.allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 0);
  EXPECT_NE(b.block_table[0], a.block_table[0]);
  EXPECT_EQ(manager.ref_count(a.block_table[0]), 1);

  Sequence c =
      make_seq(3, concat(std::vector<int32_t>(a_tokens.begin(), a_tokens.begin() + 16), random_tokens(rng, 9)));
  manager.allocate(c);  // same hash and same tokens: a real hit
  EXPECT_EQ(c.num_cached_tokens, 16);
  EXPECT_EQ(c.block_table[0], a.block_table[0]);
}

TEST(BlockManager, RefCountingWithTwoSharers) {
  std::mt19937 rng(7);
  BlockManager manager(12, 16, true);
  const auto prefix = random_tokens(rng, 32);
  Sequence a = make_seq(1, concat(prefix, random_tokens(rng, 10)));
  manager.allocate(a);
  compute_all(manager, a);
  Sequence b = make_seq(2, concat(prefix, random_tokens(rng, 21)));
  manager.allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 32);
  EXPECT_EQ(manager.num_free_blocks(), 12 - 3 - 2);

  manager.deallocate(a);  // the shared blocks stay with b; only a's own block is freed
  EXPECT_EQ(manager.num_free_blocks(), 8);
  EXPECT_EQ(manager.ref_count(b.block_table[0]), 1);
  EXPECT_EQ(manager.ref_count(b.block_table[1]), 1);
  manager.deallocate(b);
  EXPECT_EQ(manager.num_free_blocks(), 12);
  for (int id = 0; id < 12; ++id) EXPECT_EQ(manager.ref_count(id), 0);
}

TEST(BlockManager, RevivesAFreedCachedBlock) {
  std::mt19937 rng(8);
  BlockManager manager(4, 16, true);
  const auto tokens = random_tokens(rng, 50);  // 4 blocks: the whole cache
  Sequence a = make_seq(1, tokens);
  manager.allocate(a);
  compute_all(manager, a);
  const auto a_blocks = a.block_table;
  manager.deallocate(a);
  EXPECT_EQ(manager.num_free_blocks(), 4);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(manager.is_registered(a_blocks[i]));  // freed but still cached
  EXPECT_FALSE(manager.is_registered(a_blocks[3]));                             // partial blocks never are

  // The whole cache is needed again: 3 hits revived from the free list plus 1 fresh block.
  Sequence b = make_seq(2, tokens);
  ASSERT_TRUE(manager.can_allocate(b));
  manager.allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 48);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.block_table[i], a_blocks[i]);
  EXPECT_EQ(manager.num_free_blocks(), 0);
  for (int32_t id : b.block_table) EXPECT_EQ(manager.ref_count(id), 1);
}

TEST(BlockManager, CanAllocateCountsRevivedBlocksAgainstFreeSpace) {
  std::mt19937 rng(9);
  BlockManager manager(5, 16, true);
  const auto tokens = random_tokens(rng, 40);  // 3 blocks
  Sequence a = make_seq(1, tokens);
  manager.allocate(a);
  compute_all(manager, a);
  const auto a_blocks = a.block_table;
  manager.deallocate(a);  // 5 free, 2 of them cached hits for `tokens`
  Sequence filler = make_seq(2, random_tokens(rng, 32));
  manager.allocate(filler);  // takes the 2 never-used blocks first (front of the free list)
  for (int32_t id : filler.block_table) {
    EXPECT_TRUE(std::find(a_blocks.begin(), a_blocks.end(), id) == a_blocks.end()) << id;
  }
  EXPECT_EQ(manager.num_free_blocks(), 3);
  Sequence b = make_seq(3, tokens);
  EXPECT_TRUE(manager.can_allocate(b));  // 2 revived + 1 fresh = 3 free blocks
  Sequence c = make_seq(4, concat(tokens, random_tokens(rng, 16)));
  EXPECT_FALSE(manager.can_allocate(c));  // 2 revived + 2 fresh > 3
}

TEST(BlockManager, FreeListOrderKeepsRecentlyFreedBlocksCachedLongest) {
  std::mt19937 rng(10);
  BlockManager manager(4, 16, true);
  const auto a_tokens = random_tokens(rng, 32);
  Sequence a = make_seq(1, a_tokens);
  manager.allocate(a);
  EXPECT_EQ(a.block_table, (std::vector<int32_t>{0, 1}));
  compute_all(manager, a);
  manager.deallocate(a);  // free list: 2, 3, 1, 0 (released last block first)

  Sequence c = make_seq(2, random_tokens(rng, 32));
  manager.allocate(c);
  EXPECT_EQ(c.block_table, (std::vector<int32_t>{2, 3}));
  Sequence d = make_seq(3, random_tokens(rng, 10));
  manager.allocate(d);
  EXPECT_EQ(d.block_table, (std::vector<int32_t>{1}));  // reused: block 1 drops its old hash
  EXPECT_FALSE(manager.is_registered(1));
  EXPECT_TRUE(manager.is_registered(0));
  manager.deallocate(d);
  manager.deallocate(c);  // free list: 0, 1, 3, 2

  // a's tokens plus one more: block 0 still hits, block 1 was overwritten.
  Sequence e = make_seq(4, concat(a_tokens, random_tokens(rng, 1)));
  manager.allocate(e);
  EXPECT_EQ(e.num_cached_tokens, 16);
  EXPECT_EQ(e.block_table, (std::vector<int32_t>{0, 1, 3}));
}

TEST(BlockManager, FullHitRecomputesTheLastBlockInAFreshBlock) {
  std::mt19937 rng(11);
  BlockManager manager(10, 16, true);
  const auto tokens = random_tokens(rng, 32);
  Sequence a = make_seq(1, tokens);
  manager.allocate(a);
  compute_all(manager, a);
  Sequence b = make_seq(2, tokens);
  manager.allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 16);
  EXPECT_EQ(b.block_table[0], a.block_table[0]);
  EXPECT_NE(b.block_table[1], a.block_table[1]);  // shared blocks are never written
  EXPECT_EQ(manager.ref_count(a.block_table[1]), 1);
  compute_all(manager, b);  // registers b's copy of block 1 as well
  EXPECT_TRUE(manager.is_registered(b.block_table[1]));
  manager.deallocate(a);
  manager.deallocate(b);

  // Both copies are free and cached: a longer sequence hits block 0 and one copy of block 1.
  Sequence c = make_seq(3, concat(tokens, random_tokens(rng, 3)));
  manager.allocate(c);
  EXPECT_EQ(c.num_cached_tokens, 32);
  EXPECT_EQ(manager.num_free_blocks(), 10 - 3);
}

TEST(BlockManager, RegistersOnlyComputedBlocks) {
  std::mt19937 rng(12);
  BlockManager manager(20, 16, true);
  const auto tokens = random_tokens(rng, 50);
  Sequence a = make_seq(1, tokens);
  manager.allocate(a);
  manager.commit_computed_blocks(a);  // nothing computed yet
  for (int32_t id : a.block_table) EXPECT_FALSE(manager.is_registered(id));
  Sequence probe = make_seq(2, tokens);
  manager.allocate(probe);
  EXPECT_EQ(probe.num_cached_tokens, 0);  // a's blocks are not written yet: no hit
  manager.deallocate(probe);

  a.num_computed_tokens = 20;  // a chunk: block 0 complete, block 1 partly
  manager.commit_computed_blocks(a);
  EXPECT_TRUE(manager.is_registered(a.block_table[0]));
  EXPECT_FALSE(manager.is_registered(a.block_table[1]));
  Sequence probe2 = make_seq(3, tokens);
  manager.allocate(probe2);
  EXPECT_EQ(probe2.num_cached_tokens, 16);
  manager.deallocate(probe2);

  a.num_computed_tokens = 50;  // blocks 0..2 complete, block 3 has 2 tokens
  manager.commit_computed_blocks(a);
  EXPECT_TRUE(manager.is_registered(a.block_table[1]));
  EXPECT_TRUE(manager.is_registered(a.block_table[2]));
  EXPECT_FALSE(manager.is_registered(a.block_table[3]));
  Sequence probe3 = make_seq(4, tokens);
  manager.allocate(probe3);
  EXPECT_EQ(probe3.num_cached_tokens, 48);
}

TEST(BlockManager, DecodeGrowthRegistersBlocksAsTheyFill) {
  std::mt19937 rng(13);
  BlockManager manager(3, 16, true);
  const auto prompt = random_tokens(rng, 16);
  Sequence a = make_seq(1, prompt);
  manager.allocate(a);
  compute_all(manager, a);
  std::vector<int32_t> generated = random_tokens(rng, 17);
  for (int32_t token : generated) {
    a.append_token(token);  // the sampled token; its KV is computed by the next decode step
    ASSERT_TRUE(manager.can_append(a));
    manager.may_append(a);
    ASSERT_EQ(static_cast<int>(a.block_table.size()), a.num_blocks(16));
    a.num_computed_tokens = a.size();
    manager.commit_computed_blocks(a);
  }
  EXPECT_EQ(a.size(), 33);
  EXPECT_EQ(manager.num_free_blocks(), 0);
  EXPECT_TRUE(manager.is_registered(a.block_table[1]));
  EXPECT_FALSE(manager.is_registered(a.block_table[2]));
  a.append_token(7);  // token 34 fits in block 2: no new block needed even with none free
  EXPECT_TRUE(manager.can_append(a));

  Sequence b = make_seq(2, concat(prompt, std::vector<int32_t>(generated.begin(), generated.begin() + 16)));
  manager.deallocate(a);
  manager.allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 16);  // 32 tokens: fully cached, so the last block is recomputed
}

TEST(BlockManager, CanAppendNeedsAFreeBlockAtABlockBoundary) {
  std::mt19937 rng(14);
  BlockManager manager(2, 16, true);
  Sequence a = make_seq(1, random_tokens(rng, 16));
  Sequence b = make_seq(2, random_tokens(rng, 16));
  manager.allocate(a);
  manager.allocate(b);
  a.num_computed_tokens = 16;
  a.append_token(500);  // token 17 starts block 1
  EXPECT_FALSE(manager.can_append(a));
  manager.deallocate(b);
  EXPECT_TRUE(manager.can_append(a));
  manager.may_append(a);
  EXPECT_EQ(a.block_table.size(), 2u);
  EXPECT_EQ(manager.num_free_blocks(), 0);
}

TEST(BlockManager, NoHitsWithoutPrefixCachingOrWithPromptLogprobs) {
  std::mt19937 rng(15);
  const auto tokens = random_tokens(rng, 40);
  {
    BlockManager manager(10, 16, false);
    Sequence a = make_seq(1, tokens);
    manager.allocate(a);
    compute_all(manager, a);
    for (int32_t id : a.block_table) EXPECT_FALSE(manager.is_registered(id));
    Sequence b = make_seq(2, tokens);
    manager.allocate(b);
    EXPECT_EQ(b.num_cached_tokens, 0);
  }
  {
    BlockManager manager(10, 16, true);
    Sequence a = make_seq(1, tokens);
    manager.allocate(a);
    compute_all(manager, a);
    SamplingParams wants_prompt_logprobs;
    wants_prompt_logprobs.prompt_logprobs = 2;
    Sequence b(2, tokens, wants_prompt_logprobs);
    manager.allocate(b);
    EXPECT_EQ(b.num_cached_tokens, 0);  // every prompt position must be computed for its logprobs
  }
}

TEST(BlockManager, RejectsBadSizes) {
  EXPECT_THROW(BlockManager(0, 16, true), InvalidInput);
  EXPECT_THROW(BlockManager(4, 0, true), InvalidInput);
}

}  // namespace
}  // namespace nanovllm
