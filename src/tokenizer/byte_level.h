#pragma once
// GPT-2's byte-level alphabet: every byte maps to one printable code point, so that BPE vocabularies can be
// stored as text. Bytes that are printable Latin-1 map to themselves; the rest to U+0100 onward.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nanovllm {

class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();
  char32_t char_of(uint8_t byte) const { return byte_to_char_[byte]; }
  // UTF-8 text of the byte's character.
  const std::string& text_of(uint8_t byte) const { return byte_to_text_[byte]; }
  std::optional<uint8_t> byte_of(char32_t c) const;
  // The bytes a vocabulary entry stands for; nullopt if some character is outside the alphabet.
  std::optional<std::string> decode_token(std::string_view token_text) const;

 private:
  std::array<char32_t, 256> byte_to_char_{};
  std::array<std::string, 256> byte_to_text_{};
  std::array<int16_t, 324> char_to_byte_{};  // all alphabet characters are below U+0144
};

}  // namespace nanovllm
