// PCRE2 (with its JIT) runs any Split pattern; HF's "Isolated" behaviour keeps matches and the gaps between
// them as pieces.
#include <memory>

#include "common/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

namespace nanovllm {
namespace {

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

class RegexPreTokenizer final : public PreTokenizer {
 public:
  explicit RegexPreTokenizer(const std::string& pattern) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &error_code, &error_offset, nullptr));
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      throw InvalidInput("pre-tokenizer regex does not compile at offset " + std::to_string(error_offset) + ": " +
                         reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  }

  void split(std::string_view text, std::vector<Piece>& pieces) const override {
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr));
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t gap_begin = 0;
    size_t at = 0;
    while (at <= text.size()) {
      const int rc = pcre2_match(code_.get(), subject, text.size(), at, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
      const size_t begin = ov[0], end = ov[1];
      if (end == begin) {  // empty match: step over one character
        at = begin + 1;
        while (at < text.size() && utf8::is_continuation(text[at])) ++at;
        continue;
      }
      if (begin > gap_begin) pieces.push_back({static_cast<uint32_t>(gap_begin), static_cast<uint32_t>(begin)});
      pieces.push_back({static_cast<uint32_t>(begin), static_cast<uint32_t>(end)});
      gap_begin = at = end;
    }
    if (gap_begin < text.size())
      pieces.push_back({static_cast<uint32_t>(gap_begin), static_cast<uint32_t>(text.size())});
  }

 private:
  std::unique_ptr<pcre2_code, CodeDeleter> code_;
};

class WholeTextPreTokenizer final : public PreTokenizer {
 public:
  void split(std::string_view text, std::vector<Piece>& pieces) const override {
    if (!text.empty()) pieces.push_back({0, static_cast<uint32_t>(text.size())});
  }
};

}  // namespace

std::unique_ptr<PreTokenizer> make_regex_pretokenizer(const std::string& pattern) {
  return std::make_unique<RegexPreTokenizer>(pattern);
}

std::unique_ptr<PreTokenizer> make_whole_text_pretokenizer() { return std::make_unique<WholeTextPreTokenizer>(); }

}  // namespace nanovllm
