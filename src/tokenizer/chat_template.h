#pragma once
// Renders a model's chat template (tokenizer_config.json's chat_template) as transformers' apply_chat_template
// does. Pass messages and tools as nlohmann::ordered_json to keep the caller's key order in tool definitions
// (tojson prints keys in insertion order); the nlohmann::json overload prints them sorted.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace nanovllm {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // Parses the template; syntax errors and unsupported constructs throw InvalidInput naming the line.
  explicit ChatTemplate(std::string source);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // messages: array of {"role", "content", ...}; tools: null or an array; extra: more template variables
  // (e.g. {"enable_thinking": false}). Special tokens named in `special_tokens` (bos_token, eos_token...) may be
  // passed through extra as well.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const nlohmann::ordered_json& extra) const;
  std::string render(const nlohmann::json& messages, const nlohmann::json& tools, bool add_generation_prompt,
                     const nlohmann::json& extra) const;

 private:
  std::unique_ptr<jinja::Template> template_;
};

}  // namespace nanovllm
