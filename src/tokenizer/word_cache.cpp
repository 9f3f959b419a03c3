#include "tokenizer/word_cache.h"

namespace nanovllm {

WordCache::WordCache(size_t max_entries) : max_entries_(max_entries) {
  size_t capacity = 16;
  while (capacity < max_entries * 2) capacity <<= 1;
  slots_.resize(capacity);
}

void WordCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  keys_.clear();
  ids_.clear();
  used_ = 0;
}

std::span<const int32_t> WordCache::find(std::string_view word, uint64_t h, bool& found) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == 0) break;
    if (s.hash == h && s.key_length == word.size() && keys_.compare(s.key_begin, s.key_length, word) == 0) {
      found = true;
      return {ids_.data() + s.ids_begin, s.ids_length};
    }
  }
  found = false;
  return {};
}

void WordCache::insert(std::string_view word, uint64_t h, std::span<const int32_t> ids) {
  if (used_ >= max_entries_ || keys_.size() + word.size() > UINT32_MAX / 2) clear();
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].hash != 0) i = (i + 1) & mask;
  slots_[i] = Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                   static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(ids.size())};
  keys_.append(word);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++used_;
}

}  // namespace nanovllm
