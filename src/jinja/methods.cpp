#include "jinja/methods.h"

namespace nanovllm::jinja {

Value bound_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return string_method(obj.as_string(), name);
  if (obj.is_dict()) return dict_method(obj, name);
  if (obj.is_list() && (name == "append" || name == "pop" || name == "extend" || name == "insert")) {
    throw Error("list." + name + " is not allowed: chat templates run in an immutable sandbox");
  }
  return Value();
}

}  // namespace nanovllm::jinja
