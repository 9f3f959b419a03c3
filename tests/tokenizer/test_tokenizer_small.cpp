// A tiny tokenizer.json built here: merges, added tokens, post-processor, errors — no downloaded files needed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm {
namespace {

using nlohmann::json;

// Vocabulary: the 256 byte-level characters (ids 0..255 by byte), then merged tokens.
json tiny_tokenizer_json() {
  const ByteLevelAlphabet alphabet;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[alphabet.text_of(static_cast<uint8_t>(b))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"l", "l"},         {"h", "e"},  {"he", "ll"}, {"hell", "o"},        {"\xC4\xA0", "w"},
      {"\xC4\xA0w", "o"}, {"r", "ld"}, {"l", "d"},   {"\xC4\xA0wo", "rld"}};
  int next_id = 256;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next_id++;
    merge_list.push_back(a + " " + b);  // the older "a b" string form
  }
  return json{
      {"version", "1.0"},
      {"added_tokens",
       json::array({json{{"id", 300}, {"content", "<|end|>"}, {"special", true}},
                    json{{"id", 301}, {"content", "<pad>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}},
                    json{{"id", 302}, {"content", "<think>"}, {"special", false}}})},
      {"normalizer", json{{"type", "NFC"}}},
      {"pre_tokenizer",
       json{{"type", "Sequence"},
            {"pretokenizers",
             json::array({json{{"type", "Split"},
                               {"pattern", {{"Regex", R"( ?\p{L}+| ?\p{N}+|\s+|[^\s\p{L}\p{N}]+)"}}},
                               {"behavior", "Isolated"},
                               {"invert", false}},
                          json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor", nullptr},
      {"decoder", json{{"type", "ByteLevel"}}},
      {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

Tokenizer tiny(const json& j = tiny_tokenizer_json()) { return Tokenizer::from_json(j.dump(), "", "tiny.json"); }

TEST(TinyTokenizer, MergesByRank) {
  const Tokenizer t = tiny();
  const auto hello = t.token_to_id("hello");
  const auto world = t.token_to_id("\xC4\xA0world");
  ASSERT_TRUE(hello && world);
  EXPECT_EQ(t.encode("hello world"), (std::vector<int32_t>{*hello, *world}));
  EXPECT_EQ(t.encode("ld"), (std::vector<int32_t>{*t.token_to_id("ld")}));
  EXPECT_EQ(t.encode("hex"), (std::vector<int32_t>{*t.token_to_id("he"), 'x'}));
  EXPECT_EQ(t.decode(t.encode("hello world"), false), "hello world");
  EXPECT_EQ(t.vocab_size(), 303);
}

TEST(TinyTokenizer, AddedTokensMatchBeforeSplittingAndStripWhereAsked) {
  const Tokenizer t = tiny();
  const auto ids = t.encode("he<|end|>llo");
  EXPECT_EQ(ids, (std::vector<int32_t>{*t.token_to_id("he"), 300, *t.token_to_id("ll"), 'o'}));
  // <pad> has lstrip and rstrip: the spaces around it vanish into it.
  EXPECT_EQ(t.encode("a  <pad>  b"), (std::vector<int32_t>{'a', 301, 'b'}));
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(302));
  const std::vector<int32_t> mixed{'a', 300, 302, 'b'};
  EXPECT_EQ(t.decode(mixed, false), "a<|end|><think>b");
  EXPECT_EQ(t.decode(mixed, true), "a<think>b");
}

TEST(TinyTokenizer, TemplateProcessingAddsBos) {
  json j = tiny_tokenizer_json();
  j["post_processor"] =
      json{{"type", "TemplateProcessing"},
           {"single", json::array({json{{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}},
                                   json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
           {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {300}}, {"tokens", {"<|end|>"}}}}}}};
  const Tokenizer t = tiny(j);
  EXPECT_EQ(t.encode("x"), (std::vector<int32_t>{300, 'x'}));
}

TEST(TinyTokenizer, InvalidUtf8IsRejectedWithItsOffset) {
  const Tokenizer t = tiny();
  try {
    t.encode(
        "abc\xFF"
        "def");
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("offset 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0xFF"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.encode("\xE2\x82"), InvalidInput);
}

TEST(TinyTokenizer, DecodeRejectsOutOfRangeIdsAndRepairsBytes) {
  const Tokenizer t = tiny();
  EXPECT_THROW(t.decode(std::vector<int32_t>{303}, false), InvalidInput);
  EXPECT_THROW(t.decode(std::vector<int32_t>{-1}, false), InvalidInput);
  // Byte tokens that do not form UTF-8 decode to U+FFFD, as HF.
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xE2, 0x82, 'a'}, false),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xE2, 0x82, 0xAC}, false), "\xE2\x82\xAC");
}

TEST(TinyTokenizer, MalformedFilesNameTheFileAndTheProblem) {
  auto message_of = [](const std::string& text) -> std::string {
    try {
      Tokenizer::from_json(text, "", "bad/tokenizer.json");
    } catch (const InvalidInput& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message_of("{not json").find("bad/tokenizer.json: not valid JSON"), std::string::npos);
  EXPECT_NE(message_of("[1,2]").find("bad/tokenizer.json"), std::string::npos);
  EXPECT_NE(message_of(R"({"model": {"type": "Unigram"}})").find("only BPE"), std::string::npos);
  json j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("nothere x");
  EXPECT_NE(message_of(j.dump()).find("not in the vocabulary"), std::string::npos);
  j = tiny_tokenizer_json();
  j["model"]["vocab"] = json::array();
  EXPECT_NE(message_of(j.dump()).find("model.vocab"), std::string::npos);
  j = tiny_tokenizer_json();
  j["normalizer"] = json{{"type", "Lowercase"}};
  EXPECT_NE(message_of(j.dump()).find("normalizer 'Lowercase'"), std::string::npos);
  j = tiny_tokenizer_json();
  j["added_tokens"][0]["id"] = "x";
  EXPECT_NE(message_of(j.dump()).find("bad/tokenizer.json"), std::string::npos);
  j = tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(";
  EXPECT_NE(message_of(j.dump()).find("regex"), std::string::npos);
  EXPECT_THROW(Tokenizer::from_model_dir("/nonexistent/model"), InvalidInput);
  EXPECT_THROW(Tokenizer::from_json(tiny_tokenizer_json().dump(), "{oops", "t.json", "cfg.json"), InvalidInput);
}

TEST(TinyTokenizer, ConfigGivesChatTemplateAndSpecialTokens) {
  const json config{
      {"chat_template", "{{ messages[0].content }}"}, {"eos_token", {{"content", "<|end|>"}}}, {"bos_token", nullptr}};
  const Tokenizer t = Tokenizer::from_json(tiny_tokenizer_json().dump(), config.dump());
  ASSERT_TRUE(t.chat_template().has_value());
  EXPECT_EQ(*t.chat_template(), "{{ messages[0].content }}");
  EXPECT_EQ(t.eos_token(), std::optional<std::string>("<|end|>"));
  EXPECT_FALSE(t.bos_token().has_value());
}

}  // namespace
}  // namespace nanovllm
