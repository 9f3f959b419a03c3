#include "server/chat_output_parser.h"

namespace nanovllm::server {

namespace {
void append(ToolCallSplit&& split, ChatOutput& out) {
  out.content += split.content;
  for (ToolCall& call : split.tool_calls) out.tool_calls.push_back(std::move(call));
}
}  // namespace

ChatOutputParser::ChatOutputParser(bool reasoning, bool tool_calls) {
  if (reasoning) reasoning_.emplace();
  if (tool_calls) tools_.emplace();
}

ChatOutput ChatOutputParser::parse(std::string_view text) const {
  ChatOutput out;
  std::string content(text);
  if (reasoning_) {
    ReasoningSplit split = split_qwen3_reasoning(text);
    out.reasoning = std::move(split.reasoning);
    content = std::move(split.content);
  }
  if (tools_) append(parse_hermes_tool_calls(content), out);
  else out.content = std::move(content);
  return out;
}

void ChatOutputParser::add_content(std::string_view content, bool last, ChatOutput& out) {
  if (!tools_) {
    out.content += content;
    return;
  }
  if (!content.empty()) append(tools_->feed(content), out);
  if (last) append(tools_->flush(), out);
}

ChatOutput ChatOutputParser::feed(std::string_view delta) {
  ChatOutput out;
  if (!reasoning_) {
    add_content(delta, false, out);
    return out;
  }
  ReasoningSplit split = reasoning_->feed(delta);
  out.reasoning = std::move(split.reasoning);
  add_content(split.content, false, out);
  return out;
}

ChatOutput ChatOutputParser::flush() {
  ChatOutput out;
  std::string content;
  if (reasoning_) {
    ReasoningSplit split = reasoning_->flush();
    out.reasoning = std::move(split.reasoning);
    content = std::move(split.content);
  }
  add_content(content, true, out);
  return out;
}

}  // namespace nanovllm::server
