#include "engine/block_manager.h"

#include <algorithm>
#include <bit>
#include <string>
#include <utility>

#include "common/error.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace nanovllm {

BlockManager::BlockManager(int num_blocks, int block_size, bool enable_prefix_caching, BlockHasher hasher)
    : block_size_(block_size), enable_prefix_caching_(enable_prefix_caching), hasher_(std::move(hasher)) {
  if (num_blocks < 1) throw InvalidInput("num_kvcache_blocks must be >= 1, got " + std::to_string(num_blocks));
  if (block_size < 1) throw InvalidInput("kvcache_block_size must be >= 1, got " + std::to_string(block_size));
  blocks_.resize(num_blocks);
  for (int id = 0; id < num_blocks; ++id) blocks_[id].free_position = free_block_ids_.insert(free_block_ids_.end(), id);
}

uint64_t BlockManager::hash_block(std::span<const int32_t> tokens, uint64_t prefix_hash) {
  if constexpr (std::endian::native == std::endian::little) {
    return XXH64(tokens.data(), tokens.size_bytes(), prefix_hash);
  } else {
    std::vector<unsigned char> little(tokens.size_bytes());
    for (size_t i = 0; i < tokens.size(); ++i) {
      const auto value = static_cast<uint32_t>(tokens[i]);
      for (int byte = 0; byte < 4; ++byte) little[4 * i + byte] = static_cast<unsigned char>(value >> (8 * byte));
    }
    return XXH64(little.data(), little.size(), prefix_hash);
  }
}

std::vector<int> BlockManager::find_cached_prefix(const Sequence& seq) const {
  std::vector<int> hits;
  // A request that wants prompt logprobs must compute every prompt position (as vLLM does).
  if (!enable_prefix_caching_ || seq.params.prompt_logprobs.has_value()) return hits;
  const int num_full_blocks = seq.size() / block_size_;
  // At least one token must be computed so the sequence gets logits: a fully cached sequence recomputes its
  // last block (into a fresh block; shared blocks are never written).
  const int max_hits = num_full_blocks * block_size_ == seq.size() ? num_full_blocks - 1 : num_full_blocks;
  uint64_t prefix_hash = 0;
  for (int i = 0; i < max_hits; ++i) {
    const auto tokens = seq.block_tokens(i, block_size_);
    prefix_hash = hasher_(tokens, prefix_hash);
    const auto found = hash_to_block_.find(prefix_hash);
    if (found == hash_to_block_.end()) break;
    const Block& block = blocks_[found->second];
    if (!std::equal(tokens.begin(), tokens.end(), block.token_ids.begin(), block.token_ids.end())) break;
    hits.push_back(found->second);
  }
  return hits;
}

int BlockManager::num_blocks_to_take(const Sequence& seq, std::vector<int> hits) const {
  const int num_fresh = seq.num_blocks(block_size_) - static_cast<int>(hits.size());
  // A hit on a block with no owners takes it out of the free list too (count each block once).
  std::sort(hits.begin(), hits.end());
  hits.erase(std::unique(hits.begin(), hits.end()), hits.end());
  const auto num_revived = std::count_if(hits.begin(), hits.end(), [&](int id) { return blocks_[id].ref_count == 0; });
  return num_fresh + static_cast<int>(num_revived);
}

bool BlockManager::can_allocate(const Sequence& seq) const {
  return num_free_blocks() >= num_blocks_to_take(seq, find_cached_prefix(seq));
}

void BlockManager::allocate(Sequence& seq) {
  if (!seq.block_table.empty()) {
    throw EngineError("BlockManager::allocate: sequence " + std::to_string(seq.seq_id) + " already has blocks");
  }
  const std::vector<int> hits = find_cached_prefix(seq);
  if (num_free_blocks() < num_blocks_to_take(seq, hits)) {
    throw EngineError("BlockManager::allocate: not enough free blocks for sequence " + std::to_string(seq.seq_id));
  }
  const int num_blocks_needed = seq.num_blocks(block_size_);
  seq.block_table.reserve(num_blocks_needed);
  for (int block_id : hits) {
    reuse_cached_block(block_id);
    seq.block_table.push_back(block_id);
  }
  while (static_cast<int>(seq.block_table.size()) < num_blocks_needed) seq.block_table.push_back(take_free_block());
  seq.num_cached_tokens = static_cast<int>(hits.size()) * block_size_;
  seq.num_computed_tokens = seq.num_cached_tokens;
  if (enable_prefix_caching_) {
    num_prefix_queried_tokens_ += seq.size();
    num_prefix_hit_tokens_ += seq.num_cached_tokens;
  }
}

void BlockManager::deallocate(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) release_block(*it);
  seq.block_table.clear();
  seq.num_cached_tokens = 0;
  seq.num_computed_tokens = 0;
}

bool BlockManager::can_append(const Sequence& seq) const {
  const int missing = seq.num_blocks(block_size_) - static_cast<int>(seq.block_table.size());
  return num_free_blocks() >= missing;
}

void BlockManager::may_append(Sequence& seq) {
  while (static_cast<int>(seq.block_table.size()) < seq.num_blocks(block_size_)) {
    seq.block_table.push_back(take_free_block());
  }
}

void BlockManager::commit_computed_blocks(Sequence& seq) {
  if (!enable_prefix_caching_) return;
  const int num_computed_full =
      std::min(seq.num_computed_tokens / block_size_, static_cast<int>(seq.block_table.size()));
  // Registered blocks always form a prefix of the table (hits, then blocks registered in order): find its end
  // from the back, so a long sequence costs O(new blocks) per step.
  int first = num_computed_full;
  while (first > 0 && !blocks_[seq.block_table[first - 1]].hash) --first;
  uint64_t prefix_hash = first > 0 ? *blocks_[seq.block_table[first - 1]].hash : 0;
  for (int i = first; i < num_computed_full; ++i) {
    const auto tokens = seq.block_tokens(i, block_size_);
    prefix_hash = hasher_(tokens, prefix_hash);
    const int block_id = seq.block_table[i];
    Block& block = blocks_[block_id];
    block.hash = prefix_hash;
    block.token_ids.assign(tokens.begin(), tokens.end());
    hash_to_block_[prefix_hash] = block_id;  // the newest copy wins; an older one keeps its KV until reused
  }
}

int BlockManager::take_free_block() {
  if (free_block_ids_.empty()) throw EngineError("BlockManager: no free KV block");
  const int block_id = free_block_ids_.front();
  free_block_ids_.pop_front();
  Block& block = blocks_[block_id];
  if (block.hash) {
    const auto mapped = hash_to_block_.find(*block.hash);
    if (mapped != hash_to_block_.end() && mapped->second == block_id) hash_to_block_.erase(mapped);
    block.hash.reset();
    block.token_ids.clear();
  }
  block.ref_count = 1;
  return block_id;
}

void BlockManager::reuse_cached_block(int block_id) {
  Block& block = blocks_[block_id];
  if (block.ref_count == 0) free_block_ids_.erase(block.free_position);
  ++block.ref_count;
}

void BlockManager::release_block(int block_id) {
  Block& block = blocks_[block_id];
  if (block.ref_count <= 0) throw EngineError("BlockManager: block " + std::to_string(block_id) + " freed twice");
  if (--block.ref_count == 0) block.free_position = free_block_ids_.insert(free_block_ids_.end(), block_id);
}

}  // namespace nanovllm
