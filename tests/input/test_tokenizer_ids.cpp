// The tokenizer files as hostile input: ids that would wrap and nesting that would recurse.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "support/expect_invalid.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm {
namespace {

using nlohmann::json;
using testing::expect_invalid;

// The 256 byte-level characters as ids 0..255, no merges, and one added token with the given id.
json tokenizer_with_added_id(const json& id) {
  const ByteLevelAlphabet alphabet;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[alphabet.text_of(static_cast<uint8_t>(b))] = b;
  return json{{"added_tokens", json::array({json{{"id", id}, {"content", "<|end|>"}, {"special", true}}})},
              {"pre_tokenizer", json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
              {"decoder", json{{"type", "ByteLevel"}}},
              {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
}

TEST(TokenizerInput, AddedTokenIdThatWouldWrapIsRefused) {
  const Tokenizer ok = Tokenizer::from_json(tokenizer_with_added_id(256).dump(), "", "t.json");
  EXPECT_EQ(ok.token_to_id("<|end|>"), 256);
  // 4294967301 = 2^32 + 5: read as int32 it was 5 and replaced byte token 5.
  expect_invalid([] { Tokenizer::from_json(tokenizer_with_added_id(4294967301ull).dump(), "", "t.json"); },
                 {"t.json: field 'added_tokens[].id' must be an integer in [0, 16777216], got 4294967301"});
}

TEST(TokenizerInput, DeepNestingIsRefusedAtParse) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_invalid([&] { Tokenizer::from_json("{\"added_tokens\": " + deep + "}", "", "t.json"); },
                 {"t.json", "nested deeper than 128 levels"});
  const std::string config = "{\"chat_template\": " + deep + "}";
  expect_invalid([&] { Tokenizer::from_json(tokenizer_with_added_id(256).dump(), config, "t.json", "c.json"); },
                 {"c.json", "nested deeper"});
}

}  // namespace
}  // namespace nanovllm
