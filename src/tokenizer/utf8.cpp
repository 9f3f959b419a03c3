#include "tokenizer/utf8.h"

namespace nanovllm::utf8 {
namespace {

enum class SequenceState { kComplete, kInvalid, kTruncated };

struct SequenceCheck {
  SequenceState state;
  size_t length;  // complete: its length; invalid: the maximal invalid subpart; truncated: bytes available
};

// Checks the sequence starting at p[0] against Unicode's table of well-formed byte sequences.
SequenceCheck check_sequence(const uint8_t* p, size_t avail) {
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return {SequenceState::kComplete, 1};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {SequenceState::kInvalid, 1};
  }
  for (size_t k = 1; k < need; ++k) {
    if (k >= avail) return {SequenceState::kTruncated, avail};
    const uint8_t b = p[k];
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {SequenceState::kInvalid, k};
  }
  return {SequenceState::kComplete, need};
}

const uint8_t* bytes_of(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

}  // namespace

size_t find_invalid(std::string_view bytes) {
  const uint8_t* p = bytes_of(bytes);
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const SequenceCheck c = check_sequence(p + i, n - i);
    if (c.state != SequenceState::kComplete) return i;
    i += c.length;
  }
  return kAllValid;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t stable_prefix_length(std::string_view bytes) {
  const uint8_t* p = bytes_of(bytes);
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const SequenceCheck c = check_sequence(p + i, n - i);
    if (c.state == SequenceState::kTruncated) return i;
    i += c.length;
  }
  return n;
}

std::string to_valid_lossy(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  const uint8_t* p = bytes_of(bytes);
  const size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  size_t i = 0;
  while (i < n) {
    const SequenceCheck c = check_sequence(p + i, n - i);
    if (c.state == SequenceState::kComplete) {
      out.append(bytes.substr(i, c.length));
    } else {
      out.append(kReplacement);
    }
    i += c.length;
  }
  return out;
}

}  // namespace nanovllm::utf8
