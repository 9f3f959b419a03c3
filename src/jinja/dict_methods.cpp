// dict.items(), keys(), values() and get(key, default=None).
#include <string_view>
#include <unordered_map>

#include "jinja/access.h"
#include "jinja/arguments.h"
#include "jinja/methods.h"

namespace nanovllm::jinja {
namespace {

using DictMethod = Value (*)(const Value& dict, const CallArgs& a);

Value items(const Value& d, const CallArgs&) { return Value(items_of(d)); }
Value keys(const Value& d, const CallArgs&) { return Value(d.iterate()); }

Value values(const Value& d, const CallArgs&) {
  ValueList out;
  for (const auto& [k, v] : d.as_dict()) out.push_back(v);
  return Value(out);
}

Value get(const Value& d, const CallArgs& a) {
  const Value& key = arg(a, 0, "key", "get");
  if (key.is_string()) {
    if (const Value* v = d.find_key(key.as_string())) return *v;
  }
  const Value* def = a.get(1, "default");
  return def ? *def : Value(None{});
}

const std::unordered_map<std::string_view, DictMethod> kDictMethods = {
    {"items", items}, {"keys", keys}, {"values", values}, {"get", get}};

}  // namespace

Value dict_method(const Value& dict, const std::string& name) {
  const auto it = kDictMethods.find(name);
  if (it == kDictMethods.end()) return Value();
  const DictMethod method = it->second;
  return Value(Function([dict, method](const CallArgs& a) { return method(dict, a); }));
}

}  // namespace nanovllm::jinja
