// The NFC quick check may say "maybe" too often, never "unchanged" wrongly.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/nfc.h"
#include "tokenizer/utf8.h"

namespace nanovllm {
namespace {

TEST(Nfc, QuickCheckNeverMissesAChange) {
  const std::vector<char32_t> pool = {
      'a',    'e',    'o',    'A',    0xE9,   0xEA,   0x0301, 0x0302, 0x0323, 0x0308,  0x0327,  0x0345, 0x0344, 0x0340,
      0x212B, 0x2126, 0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01, 0x09C7, 0x09BE, 0x09D7,  0x0995,  0x09BC, 0x0B47, 0x0B3E,
      0x0915, 0x093C, 0x094D, 0x0958, 0x1E9B, 0x03B1, 0x0313, 0x1F00, 0x05D0, 0x05B7,  0xFB2E,  0x3099, 0x304B, 0x304C,
      0x0F71, 0x0F72, 0x0F73, 0x1B05, 0x1B35, 0x0DD9, 0x0DCF, 0x4E2D, 0xF900, 0x1D15E, 0x1D165, 0x0338, '<',    '='};
  std::mt19937 rng(11);
  int unchanged_claims = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) utf8::append(s, pool[rng() % pool.size()]);
    if (nfc_quick_check(s)) {
      ++unchanged_claims;
      ASSERT_EQ(nfc_normalize(s), s) << "quick check missed a change";
    }
  }
  EXPECT_GT(unchanged_claims, 1000);  // the check is not trivially "maybe"
}

TEST(Nfc, CommonTextPassesTheQuickCheck) {
  EXPECT_TRUE(nfc_quick_check("plain ASCII"));
  EXPECT_TRUE(nfc_quick_check("caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xD0\x9F\xD1\x80\xD0\xB8"));  // café 中文 При
  EXPECT_TRUE(nfc_quick_check("\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87"));  // नमस्ते
  EXPECT_FALSE(nfc_quick_check("e\xCC\x81"));  // e + combining acute composes
}

}  // namespace
}  // namespace nanovllm
