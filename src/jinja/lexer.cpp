#include "jinja/lexer.h"

#include <array>
#include <cctype>
#include <cstring>
#include <string_view>

#include "jinja/line_error.h"
#include "tokenizer/utf8.h"

namespace nanovllm::jinja {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(normalize(std::move(source))) {}

  std::vector<Token> run() {
    size_t text_begin = 0;
    bool strip_next_text = false;
    while (pos_ < src_.size()) {
      const size_t open = find_tag(pos_);
      if (open == std::string::npos) break;
      const char kind = src_[open + 1];
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      std::string text = src_.substr(text_begin, open - text_begin);
      const bool text_starts_line = text_begin == 0 || src_[text_begin - 1] == '\n';
      if (strip_next_text) text = lstrip_all(text);
      if (modifier == '-') {
        text = rstrip_all(text);
      } else if (modifier != '+' && kind != '{') {
        text = lstrip_block(text, text_starts_line);
      }
      emit_text(std::move(text));
      line_ = line_at(open);
      pos_ = open + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      bool right_strip = false, right_keep = false;
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) fail_at_line(line_, "unclosed comment");
        right_strip = close > pos_ && src_[close - 1] == '-';
        right_keep = close > pos_ && src_[close - 1] == '+';
        pos_ = close + 2;
      } else {
        tokens_.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", line_});
        lex_expression(kind == '{' ? '}' : '%', right_strip, right_keep);
        tokens_.push_back({kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, "", line_});
      }
      if (kind != '{' && !right_strip && !right_keep && pos_ < src_.size() && src_[pos_] == '\n')
        ++pos_;  // trim_blocks
      strip_next_text = right_strip;
      text_begin = pos_;
    }
    std::string tail = src_.substr(text_begin);
    if (strip_next_text) tail = lstrip_all(tail);
    emit_text(std::move(tail));
    tokens_.push_back({Tok::kEnd, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  static std::string normalize(std::string s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\r') {
        out += '\n';
        if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      } else {
        out += s[i];
      }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline = False
    return out;
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  int line_at(size_t offset) {
    while (counted_ < offset && counted_ < src_.size()) {
      if (src_[counted_] == '\n') ++counted_line_;
      ++counted_;
    }
    return counted_line_;
  }

  static std::string lstrip_all(const std::string& s) {
    size_t i = 0;
    while (i < s.size() && is_blank(s[i])) ++i;
    return s.substr(i);
  }
  static std::string rstrip_all(const std::string& s) {
    size_t n = s.size();
    while (n > 0 && is_blank(s[n - 1])) --n;
    return s.substr(0, n);
  }
  // lstrip_blocks: spaces and tabs between the start of the line and a block tag go.
  static std::string lstrip_block(const std::string& s, bool starts_line) {
    const size_t nl = s.rfind('\n');
    const size_t line_begin = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !starts_line) return s;
    for (size_t i = line_begin; i < s.size(); ++i) {
      if (s[i] != ' ' && s[i] != '\t') return s;
    }
    return s.substr(0, line_begin);
  }

  void emit_text(std::string text) {
    if (!text.empty()) tokens_.push_back({Tok::kText, std::move(text), line_});
  }

  void lex_expression(char closer, bool& right_strip, bool& right_keep) {
    int depth = 0;  // open brackets: "}}" inside {'a': {'b': 1}} does not end the tag
    while (true) {
      while (pos_ < src_.size() && is_blank(src_[pos_])) ++pos_;
      line_ = line_at(pos_);
      if (pos_ >= src_.size()) fail_at_line(line_, std::string("unclosed tag, expected '") + closer + "}'");
      if (depth == 0 && lex_tag_end(closer, right_strip, right_keep)) return;
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        lex_name();
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        tokens_.push_back({Tok::kString, lex_string(c), line_});
      } else {
        lex_operator(depth);
      }
    }
  }

  // Consumes the closer ('}}' or '%}', with an optional '-' or '+' before it) if the tag ends here.
  bool lex_tag_end(char closer, bool& right_strip, bool& right_keep) {
    const char c = src_[pos_];
    if ((c == '-' || c == '+') && pos_ + 2 < src_.size() && src_[pos_ + 1] == closer && src_[pos_ + 2] == '}') {
      right_strip = c == '-';
      right_keep = c == '+';
      pos_ += 3;
      return true;
    }
    if (c == closer && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}') {
      pos_ += 2;
      return true;
    }
    return false;
  }

  void lex_name() {
    size_t e = pos_;
    while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    tokens_.push_back({Tok::kName, src_.substr(pos_, e - pos_), line_});
    pos_ = e;
  }

  size_t skip_digits(size_t e) const {
    while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
    return e;
  }

  // 12, 1_000, 1.5, 1e3, 2.5E-2 (underscores separate digits of the integer part only).
  void lex_number() {
    size_t e = pos_;
    while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      e = skip_digits(e + 1);
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        is_float = true;
        e = skip_digits(x);
      }
    }
    std::string digits;
    for (size_t i = pos_; i < e; ++i) {
      if (src_[i] != '_') digits += src_[i];
    }
    tokens_.push_back({is_float ? Tok::kFloat : Tok::kInt, digits, line_});
    pos_ = e;
  }

  void lex_operator(int& depth) {
    static constexpr std::array<std::string_view, 6> kTwoCharOps = {"//", "**", "==", "!=", "<=", ">="};
    for (const std::string_view op : kTwoCharOps) {
      if (src_.compare(pos_, op.size(), op) == 0) {
        tokens_.push_back({Tok::kOp, std::string(op), line_});
        pos_ += 2;
        return;
      }
    }
    const char c = src_[pos_];
    if (!std::strchr("+-*/%~<>=()[]{},.:|", c)) fail_at_line(line_, std::string("unexpected character '") + c + "'");
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    tokens_.push_back({Tok::kOp, std::string(1, c), line_});
    ++pos_;
  }

  std::string lex_string(char quote) {
    std::string out;
    size_t i = pos_ + 1;
    while (true) {
      if (i >= src_.size()) fail_at_line(line_, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail_at_line(line_, "unterminated string literal");
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + width > src_.size()) fail_at_line(line_, "bad escape in string literal");
          char32_t cp = 0;
          for (size_t k = 0; k < width; ++k) {
            const char h = src_[i + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail_at_line(line_, "bad escape in string literal");
            cp = cp * 16 + static_cast<char32_t>(
                               std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail_at_line(line_, "bad escape in string literal");
          utf8::append(out, cp);
          i += width;
          break;
        }
        default:  // Python keeps unknown escapes as written
          out += '\\';
          out += e;
      }
    }
    pos_ = i + 1;
    return out;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t counted_ = 0;
  int counted_line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string source) { return Lexer(std::move(source)).run(); }

}  // namespace nanovllm::jinja
