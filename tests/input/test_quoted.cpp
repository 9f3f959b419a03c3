#include <gtest/gtest.h>

#include <string>

#include "common/quoted.h"

namespace nanovllm {
namespace {

TEST(Quoted, EscapesControlBytesAndInvalidUtf8) {
  EXPECT_EQ(quoted_text("ab"), "'ab'");
  EXPECT_EQ(quoted_text("a\nb\t\x1b[31m"), "'a\\nb\\t\\x1b[31m'");
  EXPECT_EQ(quoted_text(std::string("\0\x7f", 2)), "'\\x00\\x7f'");
  EXPECT_EQ(quoted_text("caf\xc3\xa9 \xe4\xbd\xa0"), "'caf\xc3\xa9 \xe4\xbd\xa0'");  // valid UTF-8 kept
  EXPECT_EQ(quoted_text("\xff\xc3("), "'\\xff\\xc3('");                              // invalid bytes escaped
  EXPECT_EQ(quoted_text("\xed\xa0\x80"), "'\\xed\\xa0\\x80'");                       // a surrogate is not UTF-8
}

TEST(Quoted, CutsLongValuesAndSaysHowLong) {
  const std::string long_text(20000, 'x');
  const std::string q = quoted_text(long_text);
  EXPECT_EQ(q, "'" + std::string(kQuotedMaxBytes, 'x') + "... (20000 bytes)'");
  EXPECT_EQ(escaped_excerpt(std::string(kQuotedMaxBytes, 'y')), std::string(kQuotedMaxBytes, 'y'));
}

TEST(Quoted, JsonValuesAsCompactJson) {
  EXPECT_EQ(quoted_json(nlohmann::json::parse("{\"a\": [1, 2]}")), "{\"a\":[1,2]}");
  const std::string deep = quoted_json(nlohmann::json::parse(std::string(100, '[') + std::string(100, ']')));
  EXPECT_LT(deep.size(), kQuotedMaxBytes + 30);
  EXPECT_NE(deep.find("... (200 bytes)"), std::string::npos);
  // Invalid UTF-8 inside a string is replaced, not thrown on.
  EXPECT_EQ(quoted_json(nlohmann::json(std::string("a\xff"))), "\"a\xef\xbf\xbd\"");
}

}  // namespace
}  // namespace nanovllm
