#include "jinja/arguments.h"

namespace nanovllm::jinja {

const Value& arg(const CallArgs& a, size_t index, std::string_view name, const char* what) {
  const Value* v = a.get(index, name);
  if (!v) throw Error(std::string(what) + ": missing argument '" + std::string(name) + "'");
  return *v;
}

const std::string& string_arg(const CallArgs& a, size_t index, std::string_view name, const char* what) {
  const Value& v = arg(a, index, name, what);
  if (!v.is_string()) throw Error(std::string(what) + ": argument '" + std::string(name) + "' must be a string");
  return v.as_string();
}

const std::string& need_string(const Value& v, const char* what) {
  if (!v.is_string()) throw Error(std::string(what) + " expects a string, got a " + v.type_name());
  return v.as_string();
}

const std::string* optional_string(const Value* v, const char* what) {
  if (!v || v->is_none() || v->is_undefined()) return nullptr;
  return &need_string(*v, what);
}

int64_t int_or(const Value* v, int64_t fallback) { return v && v->is_int() ? v->as_int() : fallback; }

CallArgs rest_args(const CallArgs& a, size_t from) {
  CallArgs r;
  for (size_t i = from; i < a.positional.size(); ++i) r.positional.push_back(a.positional[i]);
  return r;
}

}  // namespace nanovllm::jinja
