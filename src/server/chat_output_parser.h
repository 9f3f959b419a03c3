#pragma once
// What the server's output parsers make of a chat answer: Qwen3's reasoning first (--reasoning-parser qwen3),
// then Hermes tool calls in what is left (--tool-call-parser hermes, for requests with tools and tool_choice
// "auto"). Either may be off; with both off everything is content. The streamed form gives, over all feed()
// calls and flush(), what the whole form gives.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"

namespace nanovllm::server {

struct ChatOutput {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
};

class ChatOutputParser {
 public:
  ChatOutputParser(bool reasoning, bool tool_calls);

  bool reasoning() const { return reasoning_.has_value(); }
  bool tool_calls() const { return tools_.has_value(); }

  // The whole answer at once.
  ChatOutput parse(std::string_view text) const;
  // Streamed: what is new after `delta`; flush() at the end.
  ChatOutput feed(std::string_view delta);
  ChatOutput flush();

 private:
  // Content after the reasoning parser, through the tool-call parser.
  void add_content(std::string_view content, bool last, ChatOutput& out);

  std::optional<Qwen3ReasoningStream> reasoning_;
  std::optional<HermesToolCallStream> tools_;
};

}  // namespace nanovllm::server
