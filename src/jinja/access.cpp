#include "jinja/access.h"

#include <algorithm>

#include "jinja/arguments.h"
#include "jinja/methods.h"
#include "jinja/python_str.h"

namespace nanovllm::jinja {
namespace {

// Python's index into a sequence of n items: negative counts from the end; nullopt when outside.
std::optional<size_t> sequence_index(int64_t index, int64_t n) {
  if (index < 0) index += n;
  if (index < 0 || index >= n) return std::nullopt;
  return static_cast<size_t>(index);
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_dict() || obj.is_namespace()) {
    if (const Value* v = obj.find_key(name)) return *v;
  }
  return bound_method(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict() || obj.is_namespace()) {
    if (key.is_string()) {
      if (const Value* v = obj.find_key(key.as_string())) return *v;
      return bound_method(obj, key.as_string());
    }
    return Value();
  }
  if (obj.is_list() && key.is_int()) {
    const auto i = sequence_index(key.as_int(), static_cast<int64_t>(obj.as_list().size()));
    if (!i) return Value::undefined("index " + std::to_string(key.as_int()));
    return obj.as_list()[*i];
  }
  if (obj.is_string() && key.is_int()) {
    const std::u32string u = to_u32(obj.as_string());
    const auto i = sequence_index(key.as_int(), static_cast<int64_t>(u.size()));
    if (!i) return Value::undefined("index " + std::to_string(key.as_int()));
    return Value(from_u32(std::u32string_view(&u[*i], 1)));
  }
  if (key.is_string()) return bound_method(obj, key.as_string());
  return Value();
}

Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0) throw Error("slice step cannot be zero");
  auto pick = [&](int64_t n, auto&& take) {
    auto clamp = [&](std::optional<int64_t> v, int64_t def_pos, int64_t def_neg) {
      if (!v) return st > 0 ? def_pos : def_neg;
      int64_t x = *v;
      if (x < 0) x += n;
      if (st > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = clamp(start, 0, n - 1), e = clamp(stop, n, -1);
    for (__int128 i = b; st > 0 ? i < e : i > e; i += st) take(static_cast<size_t>(i));
  };
  if (obj.is_list()) {
    ValueList out;
    const ValueList& l = obj.as_list();
    pick(static_cast<int64_t>(l.size()), [&](size_t i) { out.push_back(l[i]); });
    return Value(std::move(out));
  }
  if (obj.is_string()) {
    const std::u32string u = to_u32(obj.as_string());
    std::u32string out;
    pick(static_cast<int64_t>(u.size()), [&](size_t i) { out.push_back(u[i]); });
    return Value(from_u32(out));
  }
  throw Error("a " + obj.type_name() + " cannot be sliced");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string())
    return container.as_string().find(need_string(item, "'in' on a string")) != std::string::npos;
  if (container.is_list()) {
    for (const Value& v : container.as_list()) {
      if (v.equals(item)) return true;
    }
    return false;
  }
  if (container.is_dict() || container.is_namespace())
    return item.is_string() && container.find_key(item.as_string()) != nullptr;
  if (container.is_undefined()) return false;
  throw Error("'in' needs a string, list or dict on its right, got a " + container.type_name());
}

Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = numeric && part.size() < 18 ? get_item(v, Value(static_cast<int64_t>(std::stoll(part))))
                                    : get_attribute(v, part);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

ValueList items_of(const Value& v) {
  if (v.is_undefined()) return {};
  if (!v.is_dict()) throw Error("items expects a dict, got a " + v.type_name());
  ValueList out;
  for (const auto& [k, val] : v.as_dict()) out.emplace_back(ValueList{Value(k), val});
  return out;
}

}  // namespace nanovllm::jinja
