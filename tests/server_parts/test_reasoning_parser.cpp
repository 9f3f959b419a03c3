// Qwen3's <think> split, whole and streamed: the streamed parts, joined, must equal the whole split for every
// way of cutting the output.
#include <gtest/gtest.h>

#include "server/reasoning_parser.h"
#include "text_cuttings.h"

namespace nanovllm::server {
namespace {

struct Case {
  std::string text, reasoning, content;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"Hello there.", "", "Hello there."},             // thinking disabled
      {"", "", ""},                                     // nothing generated
      {"<think>", "", ""},                              // cut off at once
      {"<think>plan</think>answer", "plan", "answer"},  // no newlines
      {"<think>\nLet me think.\nStep two.\n</think>\n\nThe answer is 4.", "Let me think.\nStep two.",
       "The answer is 4."},                                                       // Qwen3's own framing
      {"<think>\n\n</think>\n\nDirect answer.\n", "", "Direct answer.\n"},        // empty thinking
      {"<think>\nstill thinking\nabout it\n\n", "still thinking\nabout it", ""},  // unclosed: all reasoning
      {"<think>unclosed </thi", "unclosed </thi", ""},                            // a half tag is text
      {"<thin", "", "<thin"},                                                     // a half opening is content
      {"Answer first <think>not reasoning</think> tail", "",
       "Answer first <think>not reasoning</think> tail"},  // <think> not at the start
      {" <think>x</think>y", "", " <think>x</think>y"},
      {"<think>a\n<b>\n</think>\nc</think>d", "a\n<b>", "c</think>d"},      // only the first close counts
      {"<think>a\n\nb\n</thinking>\n</think>", "a\n\nb\n</thinking>", ""},  // near-tags stay
      {"<think>\n思考 🤔 ü\n</think>\n\n答案：四", "思考 🤔 ü", "答案：四"},  // unicode
      {"<think></think>", "", ""},
      {"<think>\r\nx\r\n</think>\r\ny", "\r\nx\r", "\r\ny"},  // only \n is framing
  };
  return all;
}

TEST(Qwen3Reasoning, WholeText) {
  for (const Case& c : cases()) {
    const ReasoningSplit split = split_qwen3_reasoning(c.text);
    EXPECT_EQ(split.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(split.content, c.content) << c.text;
  }
}

ReasoningSplit streamed(const std::vector<std::string_view>& pieces) {
  Qwen3ReasoningStream stream;
  ReasoningSplit joined;
  const auto add = [&](const ReasoningSplit& part) {
    EXPECT_EQ(part.reasoning.find("think>"), std::string::npos);  // a tag never leaks out half-cut
    joined.reasoning += part.reasoning;
    joined.content += part.content;
  };
  for (std::string_view piece : pieces) add(stream.feed(piece));
  add(stream.flush());
  return joined;
}

TEST(Qwen3Reasoning, StreamedEqualsWholeForEveryCutting) {
  for (const Case& c : cases()) {
    for (const std::vector<std::string_view>& pieces : text_cuttings(c.text)) {
      const ReasoningSplit split = streamed(pieces);
      ASSERT_EQ(split.reasoning, c.reasoning) << describe_cutting(pieces);
      ASSERT_EQ(split.content, c.content) << describe_cutting(pieces);
    }
  }
}

TEST(Qwen3Reasoning, StreamPassesTextOnAsSoonAsItIsSafe) {
  Qwen3ReasoningStream stream;
  EXPECT_EQ(stream.feed("<thi").reasoning, "");
  ReasoningSplit part = stream.feed("nk>\nstep one\n");
  EXPECT_EQ(part.reasoning, "step one");  // the newline waits: it may frame </think>
  part = stream.feed("step two </");
  EXPECT_EQ(part.reasoning, "\nstep two ");
  part = stream.feed("think>\n\nAns");
  EXPECT_EQ(part.reasoning, "");
  EXPECT_EQ(part.content, "Ans");
  part = stream.feed("wer <think>");
  EXPECT_EQ(part.content, "wer <think>");  // after the reasoning nothing is held
  part = stream.flush();
  EXPECT_EQ(part.reasoning + part.content, "");
}

TEST(Qwen3Reasoning, ContentWithoutThinkingIsNotHeldBack) {
  Qwen3ReasoningStream stream;
  EXPECT_EQ(stream.feed("<").content, "");  // may be <think>
  EXPECT_EQ(stream.feed("b>bold</think>").content, "<b>bold</think>");
  EXPECT_EQ(stream.feed("\n").content, "\n");
}

}  // namespace
}  // namespace nanovllm::server
