#pragma once
// UTF-8 helpers: validation, code point iteration, and Rust's from_utf8_lossy (which HF's decode uses).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nanovllm::utf8 {

inline constexpr size_t kAllValid = static_cast<size_t>(-1);

// A byte inside a multi-byte sequence (10xxxxxx): text cut before it would split a character.
inline bool is_continuation(char byte) { return (static_cast<uint8_t>(byte) & 0xC0) == 0x80; }

// Offset of the first byte that does not start a complete, well-formed sequence; kAllValid if none.
size_t find_invalid(std::string_view bytes);

// Decodes the code point at bytes[i] (which must be valid UTF-8) and advances i past it.
inline char32_t decode_at(std::string_view bytes, size_t& i) {
  const auto b0 = static_cast<uint8_t>(bytes[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  auto cont = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(bytes[i + k]) & 0x3F); };
  char32_t cp;
  if (b0 < 0xE0) {
    cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
    i += 2;
  } else if (b0 < 0xF0) {
    cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
    i += 3;
  } else {
    cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    i += 4;
  }
  return cp;
}

void append(std::string& out, char32_t cp);

// Length of the prefix whose decoding can no longer change when more bytes arrive: everything except a
// trailing sequence that is incomplete but still valid so far.
size_t stable_prefix_length(std::string_view bytes);

// As Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string to_valid_lossy(std::string_view bytes);

}  // namespace nanovllm::utf8
