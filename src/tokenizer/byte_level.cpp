#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace nanovllm {

ByteLevelAlphabet::ByteLevelAlphabet() {
  char_to_byte_.fill(-1);
  auto printable = [](int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  char32_t next_free = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = printable(b) ? static_cast<char32_t>(b) : next_free++;
    byte_to_char_[b] = c;
    char_to_byte_[c] = static_cast<int16_t>(b);
    utf8::append(byte_to_text_[b], c);
  }
}

std::optional<uint8_t> ByteLevelAlphabet::byte_of(char32_t c) const {
  if (c >= char_to_byte_.size() || char_to_byte_[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(char_to_byte_[c]);
}

std::optional<std::string> ByteLevelAlphabet::decode_token(std::string_view token_text) const {
  if (utf8::find_invalid(token_text) != utf8::kAllValid) return std::nullopt;
  std::string bytes;
  size_t i = 0;
  while (i < token_text.size()) {
    const auto b = byte_of(utf8::decode_at(token_text, i));
    if (!b) return std::nullopt;
    bytes.push_back(static_cast<char>(*b));
  }
  return bytes;
}

}  // namespace nanovllm
