#pragma once
// Python's str operations on UTF-8 strings, counting code points as Python does.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::jinja {

// Invalid UTF-8 is repaired (U+FFFD) first, so decoding never reads past the end.
std::u32string to_u32(std::string_view s);
std::string from_u32(std::u32string_view s);
// str.isspace() for one code point.
bool is_python_space(char32_t c);

// str.strip / lstrip / rstrip: chars == nullptr strips whitespace, else any of its code points.
std::string strip(const std::string& s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit): sep == nullptr splits on runs of whitespace; maxsplit < 0 means no limit.
std::vector<std::string> split(const std::string& s, const std::string* sep, int64_t maxsplit);
// str.replace(old, new, count); count < 0 replaces all.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count);

// lower / upper / title / capitalize. Only ASCII letters change case; other characters are kept as they are.
enum class Case { kLower, kUpper, kTitle, kCapitalize };
std::string change_case(const std::string& s, Case to);

}  // namespace nanovllm::jinja
