#include "server/tool_call_parser.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json_parse.h"
#include "server/held_back_text.h"

namespace nanovllm::server {

namespace {
constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kWhitespace = " \t\r\n";

bool is_whitespace(std::string_view text) { return text.find_first_not_of(kWhitespace) == std::string_view::npos; }

// The call a block's JSON (between the tags) describes, or nothing when it is not a well-formed call.
std::optional<ToolCall> parse_call(std::string_view json_text) {
  nlohmann::ordered_json call;
  try {
    call = parse_json<nlohmann::ordered_json>(json_text, "tool call");
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
  if (!call.is_object()) return std::nullopt;
  const auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  const auto arguments = call.find("arguments");
  if (arguments != call.end() && !arguments->is_object()) return std::nullopt;
  return ToolCall{.name = name->get<std::string>(), .arguments = arguments == call.end() ? "{}" : arguments->dump()};
}

// Where the block that starts at `open` ends (one past its </tool_call>), or npos while it is unclosed.
size_t block_end(std::string_view text, size_t open) {
  const size_t close = text.find(kCallClose, open + kCallOpen.size());
  return close == std::string_view::npos ? std::string_view::npos : close + kCallClose.size();
}

std::optional<ToolCall> parse_block(std::string_view block) {
  return parse_call(block.substr(kCallOpen.size(), block.size() - kCallOpen.size() - kCallClose.size()));
}
}  // namespace

ToolCallSplit parse_hermes_tool_calls(std::string_view text) {
  ToolCallSplit out;
  size_t pos = 0;
  bool after_call = false;
  for (size_t open = text.find(kCallOpen); open != std::string_view::npos; open = text.find(kCallOpen, pos)) {
    const size_t end = block_end(text, open);
    if (end == std::string_view::npos) break;
    const std::string_view before = text.substr(pos, open - pos);
    if (std::optional<ToolCall> call = parse_block(text.substr(open, end - open))) {
      out.content += before.substr(0, before_trailing(before, before.size(), kWhitespace));
      out.tool_calls.push_back(std::move(*call));
      after_call = true;
    } else {
      out.content += text.substr(pos, end - pos);
      after_call = false;
    }
    pos = end;
  }
  const std::string_view rest = text.substr(pos);
  if (!(after_call && is_whitespace(rest))) out.content += rest;
  return out;
}

ToolCallSplit HermesToolCallStream::feed(std::string_view delta) {
  held_ += delta;
  ToolCallSplit out;
  while (true) {
    if (in_block_) {
      const size_t end = block_end(held_, 0);
      if (end == std::string::npos) return out;
      if (std::optional<ToolCall> call = parse_block(std::string_view(held_).substr(0, end))) {
        out.tool_calls.push_back(std::move(*call));
        after_call_ = true;
      } else {
        out.content += framing_ + held_.substr(0, end);
        after_call_ = false;
      }
      framing_.clear();
      held_.erase(0, end);
      in_block_ = false;
    }
    const size_t open = held_.find(kCallOpen);
    // Pass on text up to a block, or up to what may still become one; keep the whitespace before either.
    const size_t limit = open != std::string::npos ? open : held_.size() - partial_tag_length(held_, kCallOpen);
    const size_t text_end = before_trailing(held_, limit, kWhitespace);
    if (text_end > 0) {
      out.content += held_.substr(0, text_end);
      after_call_ = false;
    }
    if (open == std::string::npos) {
      held_.erase(0, text_end);
      return out;
    }
    framing_ = held_.substr(text_end, open - text_end);
    held_.erase(0, open);
    in_block_ = true;
  }
}

ToolCallSplit HermesToolCallStream::flush() {
  ToolCallSplit out;
  if (in_block_) out.content = framing_ + held_;  // never closed: text, unchanged
  else if (!(after_call_ && is_whitespace(held_))) out.content = held_;
  framing_.clear();
  held_.clear();
  in_block_ = false;
  return out;
}

}  // namespace nanovllm::server
