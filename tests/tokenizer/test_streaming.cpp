#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_data.h"

namespace nanovllm {
namespace {

using test::qwen3;

// Streams ids; checks every piece is whole UTF-8 and the total equals decode().
void check_stream(const std::vector<int32_t>& ids, bool skip_special) {
  StreamingDetokenizer stream(qwen3(), std::vector<int32_t>{151644, 872}, skip_special);
  std::string all;
  for (const int32_t id : ids) {
    const std::string piece = stream.push(id);
    ASSERT_EQ(utf8::find_invalid(piece), utf8::kAllValid);
    all += piece;
  }
  all += stream.flush();
  EXPECT_EQ(all, qwen3().decode(ids, skip_special));
  EXPECT_EQ(stream.text(), all);
}

TEST(StreamingDetokenizer, EqualsFullDecodeOnCorpusText) {
  REQUIRE_QWEN3();
  for (const auto& [name, text] : test::corpus_documents()) {
    const auto ids = qwen3().encode(text);
    check_stream(ids, false);
    check_stream(ids, true);
  }
}

// Random ids, biased to byte tokens that split UTF-8 characters and to special tokens.
TEST(StreamingDetokenizer, EqualsFullDecodeOnRandomIds) {
  REQUIRE_QWEN3();
  std::mt19937 rng(42);
  const int32_t vocab = qwen3().vocab_size();
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      const uint32_t kind = rng() % 4;
      ids.push_back(kind == 0   ? static_cast<int32_t>(rng() % 256)
                    : kind == 1 ? 151643 + static_cast<int32_t>(rng() % 26)
                                : static_cast<int32_t>(rng() % vocab));
    }
    check_stream(ids, iter % 2 == 0);
  }
}

TEST(StreamingDetokenizer, HoldsBackAPartialCharacter) {
  REQUIRE_QWEN3();
  // U+1F600 as four byte tokens: nothing until the last byte arrives.
  const auto ids = qwen3().encode("\xF0\x9F\x98\x80");
  StreamingDetokenizer stream(qwen3(), {}, true);
  std::string out;
  std::vector<std::string> pieces;
  for (const int32_t id : ids) pieces.push_back(stream.push(id));
  for (size_t i = 0; i + 1 < pieces.size(); ++i) EXPECT_EQ(pieces[i], "");
  EXPECT_EQ(pieces.back(), "\xF0\x9F\x98\x80");
  EXPECT_THROW(stream.push(-5), InvalidInput);
}

TEST(StopStrings, FindsStopsAcrossTokenBoundaries) {
  const std::vector<std::string> stops{"STOP", "\n\n", "end"};
  // "ST" arrived before, "OP" now: the stop started in old text, ends in new text.
  auto m = find_stop_string("hello STOP", 8, stops);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->cut_at, 6u);
  EXPECT_EQ(m->stop_index, 0u);
  // Entirely in old text: already handled earlier, not reported again.
  EXPECT_FALSE(find_stop_string("STOP and more", 8, stops));
  // Earliest start wins across stop strings.
  m = find_stop_string("a\n\nb end", 0, stops);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->cut_at, 1u);
  EXPECT_FALSE(find_stop_string("nothing here", 3, stops));
  EXPECT_FALSE(find_stop_string("STO", 0, stops));
  EXPECT_FALSE(find_stop_string("abc", 0, std::vector<std::string>{""}));
}

TEST(StopStrings, StreamedTokensCutAtTheSamePlaceAsTheWholeText) {
  REQUIRE_QWEN3();
  const std::string text = "The answer is 42.\n\nUser: next question <|im_end|> tail";
  const std::vector<std::string> stops{"User:", "question <|"};
  const auto ids = qwen3().encode(text);
  StreamingDetokenizer stream(qwen3(), {}, false);
  std::optional<StopMatch> hit;
  for (const int32_t id : ids) {
    const size_t before = stream.text().size();
    stream.push(id);
    hit = find_stop_string(stream.text(), before, stops);
    if (hit) break;
  }
  ASSERT_TRUE(hit);
  EXPECT_EQ(stream.text().substr(0, hit->cut_at), "The answer is 42.\n\n");
}

}  // namespace
}  // namespace nanovllm
