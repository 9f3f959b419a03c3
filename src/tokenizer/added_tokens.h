#pragma once
// Added tokens (special or not) are found in the raw text before normalization and pre-tokenization, leftmost
// first and longest among those starting at the same place, as HF's AddedVocabulary does.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
};

class AddedTokens {
 public:
  AddedTokens() = default;
  explicit AddedTokens(std::vector<AddedToken> tokens);

  // Calls emit(segment, -1) for plain text between matches and emit(match, id) for each added token, in order.
  // Empty plain segments are not emitted.
  void split(std::string_view text, const std::function<void(std::string_view, int32_t)>& emit) const;

 private:
  // The longest token that matches at byte i (single_word ones only outside words); nullptr if none.
  const AddedToken* match_at(std::string_view text, size_t i) const;

  std::vector<AddedToken> tokens_;                   // longest content first
  std::array<std::vector<uint32_t>, 256> by_first_;  // token indexes by first byte, longest first
};

}  // namespace nanovllm
