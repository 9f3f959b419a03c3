// The hand-written Qwen2 splitter must agree with PCRE2 running the same regex, piece for piece.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace nanovllm {
namespace {

std::vector<std::string> pieces_of(const PreTokenizer& p, std::string_view text) {
  std::vector<Piece> pieces;
  p.split(text, pieces);
  std::vector<std::string> out;
  for (const Piece& piece : pieces) out.emplace_back(text.substr(piece.begin, piece.end - piece.begin));
  return out;
}

TEST(Qwen2PreTokenizer, SplitsLikeTheRegexOnKnownCases) {
  const auto qwen = make_qwen2_pretokenizer();
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces_of(*qwen, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces_of(*qwen, "I'M they'Ve"), (V{"I", "'M", " they", "'Ve"}));
  EXPECT_EQ(pieces_of(*qwen, "a 12"), (V{"a", " ", "1", "2"}));
  EXPECT_EQ(pieces_of(*qwen, "x   y"), (V{"x", "  ", " y"}));
  EXPECT_EQ(pieces_of(*qwen, "x  \n\n y"), (V{"x", "  \n\n", " y"}));
  EXPECT_EQ(pieces_of(*qwen, "end   "), (V{"end", "   "}));
  EXPECT_EQ(pieces_of(*qwen, "hi!!\n\nok"), (V{"hi", "!!\n\n", "ok"}));
  EXPECT_EQ(pieces_of(*qwen, " (a)"), (V{" (", "a", ")"}));
  EXPECT_EQ(pieces_of(*qwen, "\t\tx"), (V{"\t", "\tx"}));
  EXPECT_EQ(pieces_of(*qwen, "\xD0\x9F\xD1\x80\xD0\xB8"), (V{"\xD0\x9F\xD1\x80\xD0\xB8"}));
  EXPECT_TRUE(pieces_of(*qwen, "").empty());
}

// Random text from a pool that hits every branch of the regex.
TEST(Qwen2PreTokenizer, AgreesWithPcre2OnRandomText) {
  const auto qwen = make_qwen2_pretokenizer();
  const auto pcre = make_regex_pretokenizer(std::string(kQwen2SplitPattern));
  const std::vector<char32_t> pool = {
      'a',    'Z',    's',     'S',     't',    'r',    'e',    'v',    'l',    'm',    'd',    'D',    0x17F,
      '\'',   ' ',    ' ',     '\t',    '\n',   '\r',   '0',    '7',    '.',    ',',    '!',    '-',    '(',
      0xA0,   0x3000, 0x2028,  0x00E9,  0x0301, 0x4E2D, 0x0928, 0x093F, 0x0E01, 0x0E31, 0x05D0, 0x0627, 0x0661,
      0x00BD, 0x2167, 0x1F600, 0x1F3FD, 0x200D, 0xFE0F, 0xFF21, 0xFF11, 0x00B2, 0x2003, 0x000B, 0x000C};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 30000; ++iter) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 16);
    for (int i = 0; i < n; ++i) utf8::append(text, pool[rng() % pool.size()]);
    ASSERT_EQ(pieces_of(*qwen, text), pieces_of(*pcre, text)) << "text: " << text;
  }
}

// Llama 3's pattern runs through PCRE2: digits in groups of up to three.
TEST(RegexPreTokenizer, RunsLlama3Pattern) {
  const auto llama3 = make_regex_pretokenizer(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  EXPECT_EQ(pieces_of(*llama3, "I'M 1234567 ok"), (std::vector<std::string>{"I", "'M", " ", "123", "456", "7", " ok"}));
}

TEST(RegexPreTokenizer, BadPatternIsInvalidInput) {
  EXPECT_THROW(make_regex_pretokenizer("(unclosed"), std::runtime_error);
}

}  // namespace
}  // namespace nanovllm
