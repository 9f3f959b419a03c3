#pragma once
// Paged KV-cache bookkeeping: which physical blocks each sequence owns, with hash-based prefix caching.
//
// A full block is identified by a chained hash: hash(block i) = XXH64(block i's int32 token ids as
// little-endian bytes, seed = hash(block i-1)), seed 0 for block 0. A lookup hit is confirmed by comparing the
// stored tokens, so a hash collision is a miss. Hashes are registered only for blocks whose KV has been
// computed (commit_computed_blocks), so a block is never hit before it was written.
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"

namespace nanovllm {

class BlockManager {
 public:
  // hash(tokens of one full block, hash of the previous block or 0).
  using BlockHasher = std::function<uint64_t(std::span<const int32_t>, uint64_t)>;

  // The default hasher is hash_block (XXH64). Tests pass another to force collisions.
  BlockManager(int num_blocks, int block_size, bool enable_prefix_caching, BlockHasher hasher = hash_block);

  static uint64_t hash_block(std::span<const int32_t> tokens, uint64_t prefix_hash);

  // Can allocate() give this sequence blocks for all its tokens now (prefix-cache hits counted)?
  bool can_allocate(const Sequence& seq) const;
  // Blocks for all current tokens; sets num_cached_tokens = num_computed_tokens = prefix-cache hits * block_size.
  void allocate(Sequence& seq);
  // Releases the blocks (last first), resets block_table, num_cached_tokens and num_computed_tokens.
  void deallocate(Sequence& seq);

  // Decode-time growth: does the token about to be computed need a block it does not have yet, and is one free?
  bool can_append(const Sequence& seq) const;
  void may_append(Sequence& seq);

  // Registers the hash of every full block below seq.num_computed_tokens that is not registered yet.
  void commit_computed_blocks(Sequence& seq);

  int num_free_blocks() const { return static_cast<int>(free_block_ids_.size()); }
  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }
  // Over every allocate() with prefix caching on: tokens looked up, and those found cached (hit rate = ratio).
  int64_t num_prefix_queried_tokens() const { return num_prefix_queried_tokens_; }
  int64_t num_prefix_hit_tokens() const { return num_prefix_hit_tokens_; }

  // Inspection for tests and stats.
  int ref_count(int block_id) const { return blocks_.at(block_id).ref_count; }
  bool is_registered(int block_id) const { return blocks_.at(block_id).hash.has_value(); }

 private:
  struct Block {
    int ref_count = 0;
    std::optional<uint64_t> hash;            // set once the block is full, computed and registered
    std::vector<int32_t> token_ids;          // the registered tokens, to confirm hits
    std::list<int>::iterator free_position;  // valid while ref_count == 0
  };

  // Physical blocks that hold this sequence's leading blocks in the prefix cache, in order, stopping at the
  // first miss. Never covers every token: the last block of a fully cached sequence is recomputed.
  std::vector<int> find_cached_prefix(const Sequence& seq) const;
  // Free blocks that allocating with these hits consumes: fresh ones plus hits revived from the free list.
  int num_blocks_to_take(const Sequence& seq, std::vector<int> hits) const;
  int take_free_block();                  // front of the free list, old hash mapping dropped
  void reuse_cached_block(int block_id);  // ref++ (revived from the free list when it was 0)
  void release_block(int block_id);       // ref--, back of the free list at 0

  int block_size_;
  bool enable_prefix_caching_;
  BlockHasher hasher_;
  std::vector<Block> blocks_;
  std::unordered_map<uint64_t, int> hash_to_block_;
  // Blocks with ref_count 0 (some still cached). Freed blocks go to the back, allocation takes the front, so
  // recently freed (likely shared) blocks stay cached longest.
  std::list<int> free_block_ids_;
  int64_t num_prefix_queried_tokens_ = 0, num_prefix_hit_tokens_ = 0;
};

}  // namespace nanovllm
