#include "jinja/python_str.h"

#include <cctype>

#include "jinja/error.h"
#include "tokenizer/utf8.h"

namespace nanovllm::jinja {

std::u32string to_u32(std::string_view s) {
  if (utf8::find_invalid(s) != utf8::kAllValid) return to_u32(utf8::to_valid_lossy(s));  // never read past the end
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(utf8::decode_at(s, i));
  return out;
}

std::string from_u32(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char32_t c : s) utf8::append(out, c);
  return out;
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string strip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::u32string u = to_u32(s);
  const std::u32string set = chars ? to_u32(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_python_space(c); };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return from_u32(std::u32string_view(u).substr(b, e - b));
}

namespace {

std::vector<std::string> split_on_whitespace(const std::string& s, int64_t maxsplit) {
  std::vector<std::string> parts;
  const std::u32string u = to_u32(s);
  size_t i = 0;
  while (i < u.size()) {
    while (i < u.size() && is_python_space(u[i])) ++i;
    if (i >= u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {  // the rest, right-stripped
      size_t e = u.size();
      while (e > i && is_python_space(u[e - 1])) --e;
      parts.emplace_back(from_u32(std::u32string_view(u).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !is_python_space(u[j])) ++j;
    parts.emplace_back(from_u32(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return parts;
}

}  // namespace

std::vector<std::string> split(const std::string& s, const std::string* sep, int64_t maxsplit) {
  if (!sep) return split_on_whitespace(s, maxsplit);
  if (sep->empty()) throw Error("split: empty separator");
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) break;
    const size_t at = s.find(*sep, start);
    if (at == std::string::npos) break;
    parts.emplace_back(s.substr(start, at - start));
    start = at + sep->size();
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters
    const std::u32string u = to_u32(s);
    int64_t done = 0;
    if (u.size() * (to.size() + 4) > (16u << 20)) throw Error("replace: result too large");
    for (const char32_t c : u) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      utf8::append(out, c);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    if (out.size() > (16u << 20)) throw Error("replace: result too large");
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::string change_case(const std::string& s, Case to) {
  std::u32string u = to_u32(s);
  bool word_start = true;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    char32_t lower = c, upper = c;
    if (c < 128) {
      lower = std::tolower(static_cast<int>(c));
      upper = std::toupper(static_cast<int>(c));
    }
    switch (to) {
      case Case::kLower:
        u[i] = lower;
        break;
      case Case::kUpper:
        u[i] = upper;
        break;
      case Case::kTitle:
        u[i] = word_start ? upper : lower;
        break;
      case Case::kCapitalize:
        u[i] = i == 0 ? upper : lower;
        break;
    }
    const bool alnum = c < 128 ? std::isalnum(static_cast<int>(c)) != 0 : true;
    word_start = !alnum;
  }
  return from_u32(u);
}

}  // namespace nanovllm::jinja
