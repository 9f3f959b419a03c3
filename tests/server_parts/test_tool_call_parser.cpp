// Hermes-style tool calls, whole and streamed: the streamed content and calls, joined, must equal the whole
// parse for every way of cutting the output.
#include <gtest/gtest.h>

#include "server/tool_call_parser.h"
#include "text_cuttings.h"

namespace nanovllm::server {
namespace {

struct Case {
  std::string text, content;
  std::vector<ToolCall> calls;
};

std::string describe(const std::vector<ToolCall>& calls) {
  std::string out;
  for (const ToolCall& c : calls) out += c.name + c.arguments + ";";
  return out;
}

const std::string kWeather = R"({"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}})";
const std::string kTime = R"({"name": "get_time", "arguments": {}})";

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"No tools needed.", "No tools needed.", {}},
      {"", "", {}},
      {"<tool_call>\n" + kWeather + "\n</tool_call>", "", {{"get_weather", R"({"city":"Paris","unit":"c"})"}}},
      {"I'll check.\n<tool_call>\n" + kWeather + "\n</tool_call>\n<tool_call>\n" + kTime + "\n</tool_call>\n",
       "I'll check.",
       {{"get_weather", R"({"city":"Paris","unit":"c"})"}, {"get_time", "{}"}}},
      // Text after a call keeps its own leading whitespace; only whitespace alone after the last call goes.
      {"Before\n<tool_call>" + kTime + "</tool_call>\nAfter\n", "Before\nAfter\n", {{"get_time", "{}"}}},
      {"A <tool_call>" + kTime + "</tool_call> B <tool_call>" + kTime + "</tool_call>  ",
       "A B",
       {{"get_time", "{}"}, {"get_time", "{}"}}},
      // Malformed blocks stay as text, unchanged, with the whitespace before them.
      {"x\n<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>\n",
       "x\n<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>\n",
       {}},
      {"<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", {}},
      {"<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call>",
       "<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call>",
       {}},
      {"<tool_call>{\"name\": \"\"}</tool_call>", "<tool_call>{\"name\": \"\"}</tool_call>", {}},
      {"<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
       "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
       {}},
      {"<tool_call>[1, 2]</tool_call>", "<tool_call>[1, 2]</tool_call>", {}},
      {"<tool_call></tool_call>", "<tool_call></tool_call>", {}},
      // A good call after a bad one is still a call; the bad one's text stays.
      {"<tool_call>oops</tool_call>\n<tool_call>" + kTime + "</tool_call>",
       "<tool_call>oops</tool_call>",
       {{"get_time", "{}"}}},
      {"<tool_call>" + kTime + "</tool_call>\n<tool_call>oops</tool_call>",
       "\n<tool_call>oops</tool_call>",
       {{"get_time", "{}"}}},
      // Never closed: text, unchanged, even after good calls.
      {"Sure <tool_call>\n" + kTime, "Sure <tool_call>\n" + kTime, {}},
      {"<tool_call>" + kTime + "</tool_call>\n<tool_call>{\"name\": \"g\"",
       "\n<tool_call>{\"name\": \"g\"",
       {{"get_time", "{}"}}},
      {"a <tool_c", "a <tool_c", {}},
      {"a </tool_call> b", "a </tool_call> b", {}},
      // The block ends at the first </tool_call>; a nested open makes it malformed.
      {"<tool_call>x<tool_call>" + kTime + "</tool_call>", "<tool_call>x<tool_call>" + kTime + "</tool_call>", {}},
      // No arguments: an empty object. Nested values and key order survive; unicode stays as it is.
      {"<tool_call>{\"name\": \"now\"}</tool_call>", "", {{"now", "{}"}}},
      {"<tool_call>{\"name\": \"search\", \"arguments\": {\"z\": [1, {\"b\": null, \"a\": true}], \"a\": 1.5}, "
       "\"id\": 3}</tool_call>",
       "",
       {{"search", R"({"z":[1,{"b":null,"a":true}],"a":1.5})"}}},
      {"天气？\n<tool_call>{\"name\": \"météo\", \"arguments\": {\"ville\": \"Zürich 🌧\", \"esc\": "
       "\"\\u00e9\\n\"}}"
       "</tool_call>",
       "天气？",
       {{"météo", "{\"ville\":\"Zürich 🌧\",\"esc\":\"é\\n\"}"}}},
  };
  return all;
}

TEST(HermesToolCalls, WholeText) {
  for (const Case& c : cases()) {
    const ToolCallSplit split = parse_hermes_tool_calls(c.text);
    EXPECT_EQ(split.content, c.content) << c.text;
    EXPECT_EQ(describe(split.tool_calls), describe(c.calls)) << c.text;
  }
}

TEST(HermesToolCalls, NestingBeyondTheJsonLimitIsText) {
  const std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " + std::string(200, '[') +
                           std::string(200, ']') + "}}</tool_call>";
  const ToolCallSplit split = parse_hermes_tool_calls(deep);
  EXPECT_EQ(split.content, deep);
  EXPECT_TRUE(split.tool_calls.empty());
}

ToolCallSplit streamed(const std::vector<std::string_view>& pieces) {
  HermesToolCallStream stream;
  ToolCallSplit joined;
  const auto add = [&](ToolCallSplit part) {
    joined.content += part.content;
    for (ToolCall& call : part.tool_calls) joined.tool_calls.push_back(std::move(call));
  };
  for (std::string_view piece : pieces) add(stream.feed(piece));
  add(stream.flush());
  return joined;
}

TEST(HermesToolCalls, StreamedEqualsWholeForEveryCutting) {
  for (const Case& c : cases()) {
    for (const std::vector<std::string_view>& pieces : text_cuttings(c.text)) {
      const ToolCallSplit split = streamed(pieces);
      ASSERT_EQ(split.content, c.content) << describe_cutting(pieces);
      ASSERT_EQ(describe(split.tool_calls), describe(c.calls)) << describe_cutting(pieces);
    }
  }
}

TEST(HermesToolCalls, StreamPassesCallsAndTextOnAsSoonAsKnown) {
  HermesToolCallStream stream;
  ToolCallSplit part = stream.feed("Let me look. <tool");
  EXPECT_EQ(part.content, "Let me look.");  // the space may frame a call
  part = stream.feed("_call>{\"name\": \"f\", ");
  EXPECT_EQ(part.content, "");
  EXPECT_TRUE(part.tool_calls.empty());
  part = stream.feed("\"arguments\": {\"q\": 1}}</tool_call>\n<tool_call>");
  ASSERT_EQ(part.tool_calls.size(), 1u);
  EXPECT_EQ(part.tool_calls[0].name, "f");
  EXPECT_EQ(part.tool_calls[0].arguments, R"({"q":1})");
  EXPECT_EQ(part.content, "");
  part = stream.feed("{\"name\": \"g\"}</tool_call>\n");
  ASSERT_EQ(part.tool_calls.size(), 1u);
  EXPECT_EQ(part.tool_calls[0].name, "g");
  part = stream.flush();
  EXPECT_EQ(part.content, "");
  EXPECT_TRUE(part.tool_calls.empty());
}

TEST(HermesToolCalls, PlainTextIsNotHeldBack) {
  HermesToolCallStream stream;
  EXPECT_EQ(stream.feed("a < b").content, "a < b");
  EXPECT_EQ(stream.feed(" and <b>").content, " and <b>");
  EXPECT_EQ(stream.feed("\n").content, "");  // trailing whitespace waits for what follows
  EXPECT_EQ(stream.feed("x").content, "\nx");
}

}  // namespace
}  // namespace nanovllm::server
