#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>
#include <utility>

#include "tokenizer/utf8.h"

namespace nanovllm {
namespace {

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
  if (c == '_') return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// The code point that ends just before byte offset `end` (text is valid UTF-8).
char32_t char_before(std::string_view text, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && utf8::is_continuation(text[begin])) --begin;
  return utf8::decode_at(text, begin);
}

// single_word: the match must not continue a word on either side.
bool stands_alone(std::string_view text, size_t begin, size_t end) {
  if (begin > 0 && is_word_char(char_before(text, begin))) return false;
  if (end < text.size()) {
    size_t at = end;
    if (is_word_char(utf8::decode_at(text, at))) return false;
  }
  return true;
}

// The match [begin, end) widened over whitespace as lstrip / rstrip ask, not past plain_begin on the left.
std::pair<size_t, size_t> stripped_span(const AddedToken& t, std::string_view text, size_t plain_begin, size_t begin,
                                        size_t end) {
  if (t.lstrip) {
    while (begin > plain_begin && is_whitespace(char_before(text, begin))) {
      --begin;
      while (utf8::is_continuation(text[begin])) --begin;
    }
  }
  if (t.rstrip) {
    while (end < text.size()) {
      size_t next = end;
      if (!is_whitespace(utf8::decode_at(text, next))) break;
      end = next;
    }
  }
  return {begin, end};
}

}  // namespace

AddedTokens::AddedTokens(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (uint32_t i = 0; i < tokens_.size(); ++i) by_first_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
}

const AddedToken* AddedTokens::match_at(std::string_view text, size_t i) const {
  for (const uint32_t c : by_first_[static_cast<uint8_t>(text[i])]) {
    const AddedToken& t = tokens_[c];
    if (text.compare(i, t.content.size(), t.content) != 0) continue;
    if (t.single_word && !stands_alone(text, i, i + t.content.size())) continue;
    return &t;
  }
  return nullptr;
}

void AddedTokens::split(std::string_view text, const std::function<void(std::string_view, int32_t)>& emit) const {
  size_t plain_begin = 0;
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* found = match_at(text, i);
    if (!found) {
      ++i;
      continue;
    }
    const auto [begin, end] = stripped_span(*found, text, plain_begin, i, i + found->content.size());
    if (begin > plain_begin) emit(text.substr(plain_begin, begin - plain_begin), -1);
    emit(text.substr(begin, end - begin), found->id);
    plain_begin = i = end;
  }
  if (plain_begin < text.size()) emit(text.substr(plain_begin), -1);
}

}  // namespace nanovllm
