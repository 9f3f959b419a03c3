#pragma once
// Helpers for the streaming output parsers: how much of the text seen so far may be passed on now, because
// no later text can turn it into part of a tag.
#include <algorithm>
#include <cstddef>
#include <string_view>

namespace nanovllm::server {

// The length of the longest end of `text` that is a proper start of `tag` ("</thi" for "</think>"): those
// bytes may still become the tag and must wait for more text.
inline size_t partial_tag_length(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.ends_with(tag.substr(0, n))) return n;
  return 0;
}

// `end` moved back over the characters of `text` before it that are in `chars`.
inline size_t before_trailing(std::string_view text, size_t end, std::string_view chars) {
  while (end > 0 && chars.find(text[end - 1]) != std::string_view::npos) --end;
  return end;
}

}  // namespace nanovllm::server
