#pragma once
// Word -> token ids, in flat arrays with open addressing: the lookup per pre-tokenized piece is the hot path of a
// warm encode. When it fills up it starts over (words repeat with a Zipf law: the frequent ones come back fast).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm {

class WordCache {
 public:
  explicit WordCache(size_t max_entries = 1 << 17);

  static uint64_t hash(std::string_view word) {
    uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a, then a final mix
    for (const char c : word) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
    h ^= h >> 29;
    return h | 1;  // 0 marks an empty slot
  }

  // The cached ids, or an empty span with found == false.
  std::span<const int32_t> find(std::string_view word, uint64_t h, bool& found) const;
  void insert(std::string_view word, uint64_t h, std::span<const int32_t> ids);

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_begin = 0;
    uint32_t key_length = 0;
    uint32_t ids_begin = 0;
    uint32_t ids_length = 0;
  };
  void clear();

  size_t max_entries_;
  size_t used_ = 0;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
};

}  // namespace nanovllm
