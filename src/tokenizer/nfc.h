#pragma once
// NFC normalization (the Qwen2 normalizer), with a quick check so that text NFC leaves unchanged — nearly all
// text — skips utf8proc.
#include <string>
#include <string_view>

namespace nanovllm {

// True when NFC(text) == text is certain (text is valid UTF-8). False means "maybe": normalize to know.
bool nfc_quick_check(std::string_view text);
// NFC via utf8proc. Throws InvalidInput if utf8proc fails.
std::string nfc_normalize(std::string_view text);

}  // namespace nanovllm
