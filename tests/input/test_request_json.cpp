// generate's request lines as hostile input: every field read is checked, never narrowed, never echoed whole.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "common/json_parse.h"
#include "ordered_line_writer.h"
#include "request_json.h"
#include "support/expect_invalid.h"

namespace nanovllm::cli {
namespace {

using testing::expect_invalid;

ParsedRequest parse_line(const std::string& line) {
  return parse_request(parse_json<nlohmann::ordered_json>(line, "line 1"), SamplingParams{});
}

TEST(RequestLine, IntegersThatWouldWrapAreRefused) {
  EXPECT_EQ(parse_line(R"({"prompt": "x", "max_tokens": 3})").params.max_tokens, 3);
  expect_invalid([] { parse_line(R"({"prompt": "x", "max_tokens": 4294967299})"); },
                 {"field 'max_tokens'", "got 4294967299"});
  expect_invalid([] { parse_line(R"({"prompt": "x", "max_tokens": 2147483648})"); },
                 {"field 'max_tokens'", "got 2147483648"});
  expect_invalid([] { parse_line(R"({"prompt": "x", "logprobs": 4294967297})"); },
                 {"field 'logprobs'", "got 4294967297"});
  expect_invalid([] { parse_line(R"({"prompt_token_ids": [1, 4294967296]})"); }, {"field 'prompt_token_ids'"});
  expect_invalid([] { parse_line(R"({"prompt": "x", "stop_token_ids": [4294967298]})"); }, {"field 'stop_token_ids'"});
  EXPECT_EQ(parse_line(R"({"prompt": "x", "seed": 18446744073709551615})").params.seed, UINT64_MAX);
}

TEST(RequestLine, FloatsMustStayFinite) {
  expect_invalid([] { parse_line(R"({"prompt": "x", "temperature": 1e300})"); },
                 {"field 'temperature' must be a finite number"});
  expect_invalid([] { parse_line(R"({"prompt": "x", "temperature": 1e999})"); }, {"line 1: number overflow"});
}

TEST(RequestLine, DeepValuesAreRefusedAtParseAndNeverEchoedWhole) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const char* field : {"prompt_token_ids", "stop", "add_generation_prompt", "tools", "messages"})
    expect_invalid([&] { parse_line(std::string("{\"") + field + "\": " + deep + "}"); }, {"nested deeper"});
  // Within the cap, a wrong value is quoted as an excerpt: 100 levels = 200 bytes of JSON, cut.
  const std::string shallow = std::string(100, '[') + std::string(100, ']');
  try {
    parse_line("{\"prompt\": \"x\", \"stop\": " + shallow + "}");
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("field 'stop' has the wrong type"), std::string::npos) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 200u) << e.what();
  }
}

TEST(RequestLine, UnknownKeysAreQuotedWithControlCharactersEscaped) {
  expect_invalid([] { parse_line("{\"prompt\": \"x\", \"\\u001b[2Jboom\": 1}"); }, {"unknown field '\\x1b[2Jboom'"});
}

TEST(OrderedLineWriter, WritesEachLineOnceEverythingBeforeItIsWritten) {
  std::ostringstream out;
  OrderedLineWriter writer(out, 3);
  writer.set(1, "b");
  EXPECT_EQ(out.str(), "");
  writer.set(0, "a");
  EXPECT_EQ(out.str(), "a\nb\n");
  writer.set(1, "again");  // a line is written once
  EXPECT_TRUE(writer.has(1));
  EXPECT_FALSE(writer.has(2));
  writer.set(2, "c");
  EXPECT_EQ(out.str(), "a\nb\nc\n");
  EXPECT_EQ(writer.written(), 3u);
  EXPECT_THROW(writer.set(3, "d"), EngineError);
}

}  // namespace
}  // namespace nanovllm::cli
