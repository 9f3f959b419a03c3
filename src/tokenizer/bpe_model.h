#pragma once
// Byte-level BPE: a word's bytes start as one symbol each and pairs merge in rank order (lowest first, leftmost
// on ties), exactly as HF tokenizers' BPE model. Results are cached per word.
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/word_cache.h"

namespace nanovllm {

class BpeModel {
 public:
  // vocab: token text -> id; merges: pairs of token texts in rank order. Throws InvalidInput (prefixed with
  // `source`) when a merge names a token that is not in the vocabulary.
  BpeModel(const std::unordered_map<std::string, int32_t>& vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           const std::string& source);

  // Appends the ids of one pre-tokenized piece (raw bytes, byte-level mapped here) to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Short words merge by scanning all pairs, long ones through a heap; tests force each to compare them.
  enum class MergeStrategy { kAuto, kScan, kHeap };
  // The same without the cache.
  void encode_word_uncached(std::string_view word, std::vector<int32_t>& out,
                            MergeStrategy strategy = MergeStrategy::kAuto) const;

 private:
  struct MergeResult {
    int32_t rank;
    int32_t merged_id;
  };
  // Open addressing over (left id, right id) -> MergeResult; the merge lookup is the hot loop.
  class MergeTable {
   public:
    void reserve(size_t count);
    void insert(int32_t left, int32_t right, MergeResult result);
    const MergeResult* find(int32_t left, int32_t right) const {
      const uint64_t key = pack(left, right);
      for (size_t slot = hash(key) & mask_;; slot = (slot + 1) & mask_) {
        if (keys_[slot] == key) return &values_[slot];
        if (keys_[slot] == kEmpty) return nullptr;
      }
    }

   private:
    static constexpr uint64_t kEmpty = ~0ull;
    static uint64_t pack(int32_t l, int32_t r) {
      return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
    }
    static size_t hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20); }
    std::vector<uint64_t> keys_;
    std::vector<MergeResult> values_;
    size_t mask_ = 0;
  };

  void merge_small(std::vector<int32_t>& symbols) const;
  void merge_large(std::vector<int32_t>& symbols) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  ByteLevelAlphabet alphabet_;
  std::array<int32_t, 256> byte_ids_{};  // -1 where the vocabulary lacks the byte's character
  MergeTable merges_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_by_bytes_;  // for ignore_merges
  bool ignore_merges_ = false;

  // Word -> ids. Guarded by cache_mutex_; an encode that finds it busy skips the cache instead of waiting.
  static constexpr size_t kMaxCachedWordBytes = 64;
  mutable std::mutex cache_mutex_;
  mutable WordCache cache_{1 << 15};

 public:
  // Holds the cache for one encode call (try-lock); without it encode_word computes every word.
  class CacheLock {
   public:
    explicit CacheLock(const BpeModel& m) : lock_(m.cache_mutex_, std::try_to_lock) {}
    bool owns() const { return lock_.owns_lock(); }

   private:
    std::unique_lock<std::mutex> lock_;
  };
  void encode_word(std::string_view word, std::vector<int32_t>& out, const CacheLock& lock) const;
};

}  // namespace nanovllm
