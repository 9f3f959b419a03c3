#include <gtest/gtest.h>

#include <string>

#include "common/json_parse.h"
#include "support/expect_invalid.h"

namespace nanovllm {
namespace {

using testing::expect_invalid;

std::string nested_array(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonParse, NestingUpToTheCapParses) {
  const nlohmann::json j = parse_json(nested_array(kMaxJsonDepth), "x");
  int depth = 0;
  for (const nlohmann::json* v = &j; v->is_array(); v = v->empty() ? nullptr : &(*v)[0]) {
    ++depth;
    if (v->empty()) break;
  }
  EXPECT_EQ(depth, kMaxJsonDepth);
}

TEST(JsonParse, DeeperNestingIsRefusedWithoutRecursing) {
  expect_invalid([] { parse_json(nested_array(kMaxJsonDepth + 1), "config.json"); },
                 {"config.json: JSON nested deeper than 128 levels"});
  // 100k levels: a stack overflow in any recursive consumer; refused while parsing.
  expect_invalid([] { parse_json<nlohmann::ordered_json>(nested_array(100000), "line 2"); }, {"line 2", "nested"});
  std::string deep_object;
  for (int i = 0; i < 100000; ++i) deep_object += "{\"a\":";
  deep_object += "1" + std::string(100000, '}');
  expect_invalid([&] { parse_json(deep_object, "header"); }, {"nested deeper"});
}

TEST(JsonParse, NumberOverflowIsInvalidInputNamingTheSource) {
  expect_invalid([] { parse_json("{\"temperature\": 1e999}", "line 1"); }, {"line 1: number overflow", "1e999"});
}

TEST(JsonParse, MalformedTextNamesTheByteAndQuotesLittle) {
  const std::string junk = "{\"a\": \"" + std::string(20000, 'x');  // unterminated string
  try {
    parse_json(junk, "line 7");
    FAIL();
  } catch (const InvalidInput& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("line 7: malformed JSON at byte"), std::string::npos) << message;
    EXPECT_LT(message.size(), 400u);
  }
}

TEST(JsonParse, DuplicateKeysAreRefusedOnlyWhenAsked) {
  EXPECT_EQ(parse_json("{\"a\": 1, \"a\": 2}", "x")["a"], 2);  // as Python: the last one wins
  expect_invalid([] { parse_json("{\"a\": 1, \"b\": {\"a\": 3}, \"a\": 2}", "h", DuplicateKeys::kReject); },
                 {"h: key 'a' appears twice"});
  // The same key in different objects is fine.
  EXPECT_NO_THROW(parse_json("{\"a\": {\"a\": 1}, \"b\": {\"a\": 2}}", "h", DuplicateKeys::kReject));
}

}  // namespace
}  // namespace nanovllm
