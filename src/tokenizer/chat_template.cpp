#include "tokenizer/chat_template.h"

#include "common/error.h"
#include "jinja/template.h"

namespace nanovllm {

ChatTemplate::ChatTemplate(std::string source) : template_(std::make_unique<jinja::Template>(std::move(source))) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra) const {
  if (!messages.is_array()) throw InvalidInput("chat template: messages must be an array");
  if (!tools.is_null() && !tools.is_array()) throw InvalidInput("chat template: tools must be null or an array");
  if (!extra.is_null() && !extra.is_object()) throw InvalidInput("chat template: extra variables must be an object");
  std::unordered_map<std::string, jinja::Value> vars;
  if (extra.is_object()) {
    for (const auto& [k, v] : extra.items()) vars[k] = jinja::Value::from_json(v);
  }
  vars["messages"] = jinja::Value::from_json(messages);
  // transformers passes tools=None when there are none; the template sees none, not undefined.
  vars["tools"] = tools.is_null() ? jinja::Value(jinja::None{}) : jinja::Value::from_json(tools);
  vars["add_generation_prompt"] = jinja::Value(add_generation_prompt);
  return template_->render(vars);
}

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& extra) const {
  return render(nlohmann::ordered_json::parse(messages.dump()), nlohmann::ordered_json::parse(tools.dump()),
                add_generation_prompt, nlohmann::ordered_json::parse(extra.dump()));
}

}  // namespace nanovllm
