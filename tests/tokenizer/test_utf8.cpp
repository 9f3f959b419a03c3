#include <gtest/gtest.h>

#include <random>

#include "tokenizer/utf8.h"

namespace nanovllm::utf8 {
namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

TEST(Utf8, FindInvalidNamesTheFirstBadByte) {
  EXPECT_EQ(find_invalid("plain ascii"), kAllValid);
  EXPECT_EQ(find_invalid("h\xC3\xA9llo \xF0\x9F\x98\x80"), kAllValid);
  EXPECT_EQ(find_invalid("ab\xFF"), 2u);
  EXPECT_EQ(find_invalid("abc\xC3"), 3u);           // truncated at the end
  EXPECT_EQ(find_invalid("x\xED\xA0\x80"), 1u);     // UTF-16 surrogate
  EXPECT_EQ(find_invalid("\xC0\xAF"), 0u);          // overlong
  EXPECT_EQ(find_invalid("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(find_invalid(std::string("a\0b", 3)), kAllValid);
}

// Rust's from_utf8_lossy replaces each maximal invalid subpart with one U+FFFD.
TEST(Utf8, LossyMatchesRustMaximalSubparts) {
  EXPECT_EQ(to_valid_lossy("a\xFF"
                           "b"),
            "a" + kFFFD + "b");
  EXPECT_EQ(to_valid_lossy("\xF0\x9F\x98"), kFFFD);  // one truncated sequence
  EXPECT_EQ(to_valid_lossy("\xF0\x9F\x98"
                           "a"),
            kFFFD + "a");
  EXPECT_EQ(to_valid_lossy("\xE0\x80\x80"), kFFFD + kFFFD + kFFFD);  // E0 needs A0..BF next
  EXPECT_EQ(to_valid_lossy("\xED\xA0\x80"), kFFFD + kFFFD + kFFFD);  // surrogates
  EXPECT_EQ(to_valid_lossy("\xC0\xAF"), kFFFD + kFFFD);
  EXPECT_EQ(to_valid_lossy("\xE2\x82"), kFFFD);
  EXPECT_EQ(to_valid_lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(to_valid_lossy("\x80\x80"), kFFFD + kFFFD);
}

TEST(Utf8, StablePrefixHoldsBackOnlyAValidIncompleteTail) {
  EXPECT_EQ(stable_prefix_length("abc"), 3u);
  EXPECT_EQ(stable_prefix_length("ab\xF0\x9F"), 2u);
  EXPECT_EQ(stable_prefix_length("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(stable_prefix_length("ab\xFF"), 3u);  // invalid is final
  EXPECT_EQ(stable_prefix_length("\xE0\x80"), 2u);
}

TEST(Utf8, LossyOfSplitEqualsLossyOfWholeAtStablePoints) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bytes;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      const uint32_t r = rng() % 6;
      bytes.push_back(static_cast<char>(r == 0   ? 'a'
                                        : r == 1 ? 0x80 + rng() % 64
                                        : r == 2 ? 0xC2 + rng() % 30
                                        : r == 3 ? 0xE0 + rng() % 16
                                        : r == 4 ? 0xF0 + rng() % 8
                                                 : rng() % 256));
    }
    const size_t stable = stable_prefix_length(bytes);
    EXPECT_EQ(to_valid_lossy(bytes.substr(0, stable)) + to_valid_lossy(bytes.substr(stable)), to_valid_lossy(bytes));
    EXPECT_EQ(find_invalid(to_valid_lossy(bytes)), kAllValid);
  }
}

}  // namespace
}  // namespace nanovllm::utf8
