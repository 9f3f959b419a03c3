// Qwen3's tokenizer against HF's outputs (tests/fixtures/tokenizer/hf_encode.json from
// tools/hf_tokenizer_reference.py, plus any folder in NANOVLLM_TOKENIZER_FIXTURES) and round-trip properties.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <random>

#include "common/error.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_data.h"

namespace nanovllm {
namespace {

using test::qwen3;

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const auto n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

TEST(Qwen3Parity, IdsAndDecodesEqualEveryFixture) {
  REQUIRE_QWEN3();
  const auto docs = test::corpus_documents();
  int files = 0;
  for (const auto& dir : test::fixture_dirs()) {
    const auto path = dir / "hf_encode.json";
    if (!std::filesystem::exists(path)) continue;
    ++files;
    const auto fixture = nlohmann::json::parse(test::read_file(path));
    const auto& records = fixture.at("documents");
    ASSERT_EQ(records.size(), docs.size()) << path << " was made from a different corpus; rerun the reference script";
    int mismatches = 0;
    for (size_t i = 0; i < docs.size(); ++i) {
      const auto& rec = records[i];
      ASSERT_EQ(rec.at("name").get<std::string>(), docs[i].first);
      const auto expected = rec.at("ids").get<std::vector<int32_t>>();
      const auto ids = qwen3().encode(docs[i].second);
      if (ids != expected) {
        ++mismatches;
        size_t at = 0;
        while (at < ids.size() && at < expected.size() && ids[at] == expected[at]) ++at;
        ADD_FAILURE() << path << ": " << docs[i].first << " differs at token " << at << " of " << expected.size();
        continue;
      }
      EXPECT_EQ(qwen3().decode(expected, false), rec.at("decoded").get<std::string>()) << docs[i].first;
      EXPECT_EQ(qwen3().decode(expected, true), rec.at("decoded_skip_special").get<std::string>()) << docs[i].first;
    }
    EXPECT_EQ(mismatches, 0) << path;
  }
  if (files == 0) GTEST_SKIP() << "no hf_encode.json fixture yet (tools/hf_tokenizer_reference.py writes it)";
}

TEST(Qwen3Parity, DecodeOfEncodeIsTheNfcText) {
  REQUIRE_QWEN3();
  for (const auto& [name, text] : test::corpus_documents()) {
    EXPECT_EQ(qwen3().decode(qwen3().encode(text), false), nfc(text)) << name;
  }
}

TEST(Qwen3Parity, SpecialTokensInsideText) {
  REQUIRE_QWEN3();
  const Tokenizer& t = qwen3();
  EXPECT_EQ(t.token_to_id("<|im_start|>"), std::optional<int32_t>(151644));
  EXPECT_EQ(t.token_to_id("<think>"), std::optional<int32_t>(151667));
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_TRUE(t.is_special(151645));
  EXPECT_FALSE(t.is_special(151667));  // <think> is added but not special
  EXPECT_EQ(t.eos_token(), std::optional<std::string>("<|im_end|>"));
  ASSERT_TRUE(t.chat_template().has_value());
  const auto ids = t.encode("<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(ids.back(), 151645);
  EXPECT_EQ(t.decode(ids, true), "user\nHi");
  EXPECT_EQ(t.encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
  EXPECT_THROW(t.decode(std::vector<int32_t>{151669}, false), InvalidInput);
}

TEST(Qwen3Parity, ScanAndHeapMergesAgreeOnLongWords) {
  REQUIRE_QWEN3();
  const auto root = nlohmann::json::parse(test::read_file(*test::qwen3_dir() / "tokenizer.json"));
  std::unordered_map<std::string, int32_t> vocab;
  for (const auto& [k, v] : root["model"]["vocab"].items()) vocab.emplace(k, v.get<int32_t>());
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& m : root["model"]["merges"]) merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
  const BpeModel model(vocab, merges, false, "tokenizer.json");
  std::mt19937 rng(99);
  const std::vector<std::string> pieces = {
      "a", "b", "in", "the", "ing", " ", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "0", "ss", "tion"};
  for (int iter = 0; iter < 300; ++iter) {
    std::string word;
    const int n = 1 + static_cast<int>(rng() % 80);
    for (int i = 0; i < n; ++i) word += pieces[rng() % pieces.size()];
    std::vector<int32_t> scan, heap;
    model.encode_word_uncached(word, scan, BpeModel::MergeStrategy::kScan);
    model.encode_word_uncached(word, heap, BpeModel::MergeStrategy::kHeap);
    ASSERT_EQ(scan, heap) << word;
  }
}

TEST(Qwen3Parity, RandomBytesEitherEncodeAndRoundTripOrAreRejected) {
  REQUIRE_QWEN3();
  std::mt19937 rng(5);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(rng() % 4 == 0 ? rng() % 256 : 0x20 + rng() % 95));
    try {
      const auto ids = qwen3().encode(s);
      EXPECT_EQ(qwen3().decode(ids, false), nfc(s));
    } catch (const InvalidInput&) {
      EXPECT_NE(utf8::find_invalid(s), utf8::kAllValid);
    }
  }
}

}  // namespace
}  // namespace nanovllm
