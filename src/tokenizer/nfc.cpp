#include "tokenizer/nfc.h"

#include <utf8proc.h>

#include <cstdlib>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace nanovllm {
namespace {

// What the quick check needs to know: characters at which NFC changes text whatever precedes them (their
// canonical decomposition is not a primary composite: singletons, exclusions, non-starter decompositions), and
// the (starter, character) pairs that compose. Hangul syllables compose algorithmically and are checked apart.
class NfcTables {
 public:
  NfcTables() : always_(0x110000 / 64, 0), second_(0x110000 / 64, 0) {
    for (char32_t c = 0xC0; c < 0x110000; ++c) {
      const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
      if (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0) continue;
      utf8proc_int32_t parts[8];
      int boundclass = 0;
      const utf8proc_ssize_t n =
          utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), parts, 8, UTF8PROC_DECOMPOSE, &boundclass);
      if (n <= 0) continue;
      const int trailing = utf8proc_get_property(parts[n - 1])->combining_class;
      if (trailing != 0) trailing_class_[c] = static_cast<uint8_t>(trailing);
      std::string self;
      utf8::append(self, c);
      if (nfc_normalize(self) != self) {  // singletons, exclusions, non-starter decompositions
        set(always_, c);
        continue;
      }
      // The composite's one-level decomposition is (NFC of all but the last part, last part).
      const char32_t last = static_cast<char32_t>(parts[n - 1]);
      std::string head;
      for (utf8proc_ssize_t k = 0; k + 1 < n; ++k) utf8::append(head, static_cast<char32_t>(parts[k]));
      const std::string first = n == 2 ? head : nfc_normalize(head);
      size_t at = 0;
      const char32_t first_cp = utf8::decode_at(first, at);
      if (at != first.size()) {
        set(always_, last);  // not a single starter: stay conservative
        continue;
      }
      set(second_, last);
      pairs_.insert(pair_key(first_cp, last));
    }
  }
  bool always(char32_t c) const { return test(always_, c); }
  // Combining class of the last character of c's canonical decomposition (a mark after c is ordered against it).
  int trailing_class(char32_t c, int own_class) const {
    const auto it = trailing_class_.find(c);
    return it == trailing_class_.end() ? own_class : it->second;
  }
  bool composes(char32_t starter, char32_t c) const {
    if (!test(second_, c)) return false;
    return pairs_.count(pair_key(starter, c)) != 0;
  }

 private:
  static uint64_t pair_key(char32_t a, char32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }
  static bool test(const std::vector<uint64_t>& bits, char32_t c) { return (bits[c >> 6] >> (c & 63)) & 1; }
  static void set(std::vector<uint64_t>& bits, char32_t c) { bits[c >> 6] |= uint64_t{1} << (c & 63); }
  std::vector<uint64_t> always_, second_;
  std::unordered_set<uint64_t> pairs_;
  std::unordered_map<char32_t, uint8_t> trailing_class_;
};

const NfcTables& tables() {
  static const NfcTables t;  // immutable after its thread-safe construction
  return t;
}

bool hangul_composes(char32_t starter, char32_t c) {
  const bool leading = starter >= 0x1100 && starter <= 0x1112;
  const bool lv_syllable = starter >= 0xAC00 && starter <= 0xD7A3 && (starter - 0xAC00) % 28 == 0;
  return (leading && c >= 0x1161 && c <= 0x1175) || (lv_syllable && c >= 0x11A7 + 1 && c <= 0x11C2);
}

}  // namespace

bool nfc_quick_check(std::string_view text) {
  const NfcTables* t = nullptr;
  int last_class = 0;
  char32_t last_starter = 0;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {  // ASCII: a starter with no composition as second
      last_starter = static_cast<uint8_t>(text[i]);
      ++i;
      last_class = 0;
      continue;
    }
    const char32_t c = utf8::decode_at(text, i);
    if (!t) t = &tables();
    if (t->always(c) || t->composes(last_starter, c) || hangul_composes(last_starter, c)) return false;
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
    const int cls = p->combining_class;
    if (cls != 0 && last_class > cls) return false;  // marks out of canonical order get reordered
    last_class = p->decomp_seqindex != UINT16_MAX ? t->trailing_class(c, cls) : cls;
    if (cls == 0) last_starter = c;
  }
  return true;
}

std::string nfc_normalize(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) throw InvalidInput(std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace nanovllm
