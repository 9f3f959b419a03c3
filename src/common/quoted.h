#pragma once
// Untrusted text inside an error message: quoted, cut to a readable length, control characters and bytes
// that are not UTF-8 escaped, so a hostile value can neither flood nor garble the terminal.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nanovllm {

inline constexpr size_t kQuotedMaxBytes = 100;

namespace detail {
// The length of the valid UTF-8 sequence at text[i] (0 when the bytes there are not one).
inline size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t lead = byte(i);
  size_t n = 0;
  uint32_t code = 0;
  if (lead >= 0xC2 && lead <= 0xDF) n = 2, code = lead & 0x1F;
  else if (lead >= 0xE0 && lead <= 0xEF) n = 3, code = lead & 0x0F;
  else if (lead >= 0xF0 && lead <= 0xF4) n = 4, code = lead & 0x07;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  const bool overlong = (n == 3 && code < 0x800) || (n == 4 && code < 0x10000);
  const bool surrogate = code >= 0xD800 && code <= 0xDFFF;
  return overlong || surrogate || code > 0x10FFFF ? 0 : n;
}
}  // namespace detail

// 'text' with \n, \t, \r, \\xHH escapes, cut after about max_bytes with "... (N bytes)" appended.
inline std::string escaped_excerpt(std::string_view text, size_t max_bytes = kQuotedMaxBytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  size_t i = 0;
  while (i < text.size() && out.size() < max_bytes) {
    const auto c = static_cast<uint8_t>(text[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c >= 0x20 && c < 0x7F) out += static_cast<char>(c);
    else if (const size_t n = c >= 0x80 ? detail::utf8_sequence_length(text, i) : 0; n != 0) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
    ++i;
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

// The same, in single quotes: 'text'.
inline std::string quoted_text(std::string_view text, size_t max_bytes = kQuotedMaxBytes) {
  std::string out(1, '\'');  // built by appending: GCC 12 warns (-Wrestrict) falsely on "'" + string
  out += escaped_excerpt(text, max_bytes);
  out += '\'';
  return out;
}

// A JSON value as compact JSON, cut like quoted_text() (strings keep their JSON quotes). Invalid UTF-8 inside
// strings is replaced rather than thrown on.
template <class Json>
std::string quoted_json(const Json& value, size_t max_bytes = kQuotedMaxBytes) {
  return escaped_excerpt(value.dump(-1, ' ', false, Json::error_handler_t::replace), max_bytes);
}

}  // namespace nanovllm
