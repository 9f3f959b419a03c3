#pragma once
// Renders a template source with variables given as JSON, as transformers' apply_chat_template passes them.
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "common/error.h"
#include "jinja/template.h"

namespace nanovllm::jinja::test {

inline std::string render(const std::string& source,
                          const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) {
  std::unordered_map<std::string, Value> vars;
  for (const auto& [k, v] : variables.items()) vars[k] = Value::from_json(v);
  return Template(source).render(vars);
}

// The InvalidInput message rendering throws, or "no error".
inline std::string error_of(const std::string& source,
                            const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) {
  try {
    render(source, variables);
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace nanovllm::jinja::test
