#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <queue>

#include "common/error.h"

namespace nanovllm {

void BpeModel::MergeTable::reserve(size_t count) {
  size_t capacity = 16;
  while (capacity < count * 2) capacity <<= 1;
  keys_.assign(capacity, kEmpty);
  values_.assign(capacity, MergeResult{0, 0});
  mask_ = capacity - 1;
}

void BpeModel::MergeTable::insert(int32_t left, int32_t right, MergeResult result) {
  const uint64_t key = pack(left, right);
  size_t slot = hash(key) & mask_;
  while (keys_[slot] != kEmpty && keys_[slot] != key) slot = (slot + 1) & mask_;
  if (keys_[slot] == key) return;  // a repeated merge keeps its first (lowest) rank
  keys_[slot] = key;
  values_[slot] = result;
}

BpeModel::BpeModel(const std::unordered_map<std::string, int32_t>& vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                   const std::string& source)
    : ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab.find(alphabet_.text_of(static_cast<uint8_t>(b)));
    byte_ids_[b] = it == vocab.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || m == vocab.end()) {
      throw InvalidInput(source + ": merge " + std::to_string(rank) + " ('" + left + "' '" + right +
                         "') uses a token that is not in the vocabulary");
    }
    merges_.insert(l->second, r->second, MergeResult{static_cast<int32_t>(rank), m->second});
  }
  if (ignore_merges_) {
    for (const auto& [text, id] : vocab) {
      if (auto bytes = alphabet_.decode_token(text)) vocab_by_bytes_.emplace(std::move(*bytes), id);
    }
  }
}

void BpeModel::merge_small(std::vector<int32_t>& symbols) const {
  while (symbols.size() > 1) {
    int32_t best_rank = INT32_MAX, best_id = -1;
    size_t best_pos = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const MergeResult* m = merges_.find(symbols[i], symbols[i + 1]);
      if (m && m->rank < best_rank) {
        best_rank = m->rank;
        best_id = m->merged_id;
        best_pos = i;
      }
    }
    if (best_id < 0) return;
    symbols[best_pos] = best_id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best_pos) + 1);
  }
}

// Linked list of symbols plus a heap of candidate merges ordered by (rank, position): O(n log n) for long words.
void BpeModel::merge_large(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const MergeResult* m = merges_.find(symbols[pos], symbols[next[pos]])) {
      heap.push({m->rank, pos, symbols[pos], symbols[next[pos]]});
    }
  };
  std::vector<bool> alive(n, true);
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int right = next[c.pos];
    if (!alive[c.pos] || right < 0 || symbols[c.pos] != c.left || symbols[right] != c.right) continue;
    symbols[c.pos] = merges_.find(c.left, c.right)->merged_id;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push_pair(prev[c.pos]);
    push_pair(c.pos);
  }
  std::vector<int32_t> merged;
  for (int i = 0; i >= 0; i = next[i]) merged.push_back(symbols[i]);
  symbols = std::move(merged);
}

void BpeModel::encode_word_uncached(std::string_view word, std::vector<int32_t>& out, MergeStrategy strategy) const {
  if (ignore_merges_) {
    if (const auto it = vocab_by_bytes_.find(word); it != vocab_by_bytes_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  for (const char ch : word) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(ch)];
    if (id >= 0) symbols.push_back(id);  // HF drops characters it cannot map when there is no unk token
  }
  if (strategy == MergeStrategy::kScan || (strategy == MergeStrategy::kAuto && symbols.size() <= 48)) {
    merge_small(symbols);
  } else {
    merge_large(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out, const CacheLock& lock) const {
  if (!lock.owns() || word.size() > kMaxCachedWordBytes) {
    encode_word_uncached(word, out);
    return;
  }
  const uint64_t h = WordCache::hash(word);
  bool found = false;
  const std::span<const int32_t> cached = cache_.find(word, h, found);
  if (found) {
    out.insert(out.end(), cached.begin(), cached.end());
    return;
  }
  const size_t begin = out.size();
  encode_word_uncached(word, out);
  cache_.insert(word, h, std::span<const int32_t>(out).subspan(begin));
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const CacheLock lock(*this);
  encode_word(word, out, lock);
}

}  // namespace nanovllm
