// A hand-written matcher for Qwen2's split regex (kQwen2SplitPattern). It reproduces the regex's leftmost-first
// alternation and backtracking branch by branch; tests compare it with the PCRE2 matcher on random text.
// Branches: 1 (?i:'s|'t|'re|'ve|'m|'ll|'d)  2 [^\r\n\p{L}\p{N}]?\p{L}+  3 \p{N}  4 ' ?[^\s\p{L}\p{N}]+[\r\n]*'
//           5 \s*[\r\n]+  6 \s+(?!\S)  7 \s+
#include <utf8proc.h>

#include <array>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace nanovllm {
namespace {

enum CharClass : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4, kNewline = 8 };

// \s as Oniguruma (HF's regex engine) defines it for Unicode: the White_Space property.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

uint8_t classify(char32_t c) {
  if (c == '\r' || c == '\n') return kSpace | kNewline;
  if (is_white_space(c)) return kSpace;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return kLetter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return kNumber;
    default:
      return 0;
  }
}

std::array<uint8_t, 128> make_ascii_classes() {
  std::array<uint8_t, 128> t{};
  for (char32_t c = 0; c < 128; ++c) t[c] = classify(c);
  return t;
}

// Branches 5 to 7 on the whitespace run that starts at k: where the piece ends.
size_t whitespace_piece_end(const std::vector<uint8_t>& cls, size_t k) {
  const size_t n = cls.size();
  size_t space_end = k;
  while (space_end < n && (cls[space_end] & kSpace) != 0) ++space_end;
  for (size_t j = space_end; j > k; --j) {
    if ((cls[j - 1] & kNewline) != 0) return j;  // branch 5: through the last newline
  }
  if (space_end == n || space_end - 1 == k)
    return space_end;    // branch 6 at the end of text, or branch 7 for a lone space before text
  return space_end - 1;  // branch 6: leave the last space to prefix the next word
}

char32_t ascii_lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

class Qwen2PreTokenizer final : public PreTokenizer {
 public:
  void split(std::string_view text, std::vector<Piece>& pieces) const override {
    // Decode once: code point, class, byte offset of each character.
    thread_local std::vector<char32_t> cps;
    thread_local std::vector<uint8_t> cls;
    thread_local std::vector<uint32_t> offs;
    cps.clear();
    cls.clear();
    offs.clear();
    for (size_t i = 0; i < text.size();) {
      offs.push_back(static_cast<uint32_t>(i));
      const char32_t c = utf8::decode_at(text, i);
      cps.push_back(c);
      cls.push_back(c < 128 ? ascii_classes_[c] : classify(c));
    }
    const size_t n = cps.size();
    offs.push_back(static_cast<uint32_t>(text.size()));

    auto run_while = [&](size_t k, auto pred) {
      while (k < n && pred(cls[k])) ++k;
      return k;
    };
    auto is_letter = [](uint8_t c) { return (c & kLetter) != 0; };
    auto is_other = [](uint8_t c) { return (c & (kSpace | kLetter | kNumber)) == 0; };
    auto is_newline = [](uint8_t c) { return (c & kNewline) != 0; };

    // Branch 1, case-insensitive as Unicode folds it ('ſ' folds to 's'): end of the contraction at k, or 0.
    auto contraction_end = [&](size_t k) -> size_t {
      if (k + 1 >= n) return 0;
      const char32_t a = ascii_lower(cps[k + 1]);
      if (a == 's' || a == 't' || a == 'm' || a == 'd' || cps[k + 1] == 0x17F) return k + 2;
      if (k + 2 >= n) return 0;
      const char32_t b = ascii_lower(cps[k + 2]);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return k + 3;
      return 0;
    };

    size_t k = 0;
    while (k < n) {
      const uint8_t c = cls[k];
      size_t end = 0;
      if (cps[k] == '\'' && (end = contraction_end(k)) != 0) {
        // branch 1
      } else if ((c & (kLetter | kNumber | kNewline)) == 0 && k + 1 < n && is_letter(cls[k + 1])) {
        end = run_while(k + 1, is_letter);  // branch 2 with its optional prefix
      } else if (is_letter(c)) {
        end = run_while(k, is_letter);  // branch 2
      } else if (c & kNumber) {
        end = k + 1;  // branch 3
      } else if (cps[k] == ' ' && k + 1 < n && is_other(cls[k + 1])) {
        end = run_while(run_while(k + 1, is_other), is_newline);  // branch 4 with its space
      } else if (is_other(c)) {
        end = run_while(run_while(k, is_other), is_newline);  // branch 4
      } else {
        end = whitespace_piece_end(cls, k);  // branches 5 to 7
      }
      pieces.push_back({offs[k], offs[end]});
      k = end;
    }
  }

 private:
  std::array<uint8_t, 128> ascii_classes_ = make_ascii_classes();
};

}  // namespace

std::unique_ptr<PreTokenizer> make_qwen2_pretokenizer() { return std::make_unique<Qwen2PreTokenizer>(); }

}  // namespace nanovllm
