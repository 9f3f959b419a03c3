#pragma once
// Hermes-style tool calls, as Qwen3 writes them: <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
// A block whose JSON parses to an object with a non-empty string "name" and, when present, an object
// "arguments" becomes a ToolCall and leaves the content; any other block (bad JSON, no name, arguments not
// an object, never closed) stays in the content unchanged. Whitespace that only frames calls is dropped:
// the whitespace just before each call, and the whitespace alone after the last one (Qwen3 writes
// "text\n<tool_call>\n{...}\n</tool_call>\n<tool_call>...").
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::server {

struct ToolCall {
  std::string name;
  std::string arguments;  // compact JSON text of an object, keys in the model's order; "{}" when absent
};

struct ToolCallSplit {
  std::string content;
  std::vector<ToolCall> tool_calls;
};

// The whole output at once.
ToolCallSplit parse_hermes_tool_calls(std::string_view text);

// The same over streamed output: the content of each feed() and of the final flush(), concatenated, and
// their calls in order, equal parse_hermes_tool_calls() of the concatenated deltas however the text was
// cut. A call is passed on when its </tool_call> arrives; text that may still become a call or its framing
// is held back until it cannot.
class HermesToolCallStream {
 public:
  // New content, and the calls completed by this delta.
  ToolCallSplit feed(std::string_view delta);
  // At the end of the output: whatever was held back (an unclosed block, as content).
  ToolCallSplit flush();

 private:
  bool in_block_ = false;    // held_ starts with <tool_call> and waits for its </tool_call>
  bool after_call_ = false;  // no content was passed on since the last call (trailing whitespace is framing)
  std::string framing_;      // the whitespace before the open block: dropped if it is a call
  std::string held_;
};

}  // namespace nanovllm::server
