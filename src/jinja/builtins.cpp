#include "jinja/builtins.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <unordered_set>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace nanovllm::jinja {
namespace {

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

// Python's str.strip family: chars=None strips whitespace, else any of the given code points.
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  const std::u32string u = to_u32(s);
  std::u32string set;
  const bool whitespace = !chars || chars->is_none() || chars->is_undefined();
  if (!whitespace) set = to_u32(need_string(*chars, "strip"));
  auto strip_it = [&](char32_t c) { return whitespace ? is_python_space(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return from_u32(std::u32string_view(u).substr(b, e - b));
}

ValueList split(const std::string& s, const Value* sep_value, int64_t maxsplit) {
  ValueList parts;
  if (!sep_value || sep_value->is_none() || sep_value->is_undefined()) {
    const std::u32string u = to_u32(s);
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && is_python_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = u.size();
        while (e > i && is_python_space(u[e - 1])) --e;
        parts.emplace_back(from_u32(std::u32string_view(u).substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !is_python_space(u[j])) ++j;
      parts.emplace_back(from_u32(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  const std::string& sep = need_string(*sep_value, "split");
  if (sep.empty()) throw Error("split: empty separator");
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) break;
    const size_t at = s.find(sep, start);
    if (at == std::string::npos) break;
    parts.emplace_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters
    const std::u32string u = to_u32(s);
    int64_t done = 0;
    if (u.size() * (to.size() + 4) > (16u << 20)) throw Error("replace: result too large");
    for (const char32_t c : u) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      utf8::append(out, c);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    if (out.size() > (16u << 20)) throw Error("replace: result too large");
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::string change_case(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::u32string u = to_u32(s);
  bool word_start = true;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    char32_t lower = c, upper = c;
    if (c < 128) {
      lower = std::tolower(static_cast<int>(c));
      upper = std::toupper(static_cast<int>(c));
    }
    if (mode == 0) u[i] = lower;
    else if (mode == 1) u[i] = upper;
    else if (mode == 2) u[i] = word_start ? upper : lower;
    else u[i] = i == 0 ? upper : lower;
    const bool alnum = c < 128 ? std::isalnum(static_cast<int>(c)) != 0 : true;
    word_start = !alnum;
  }
  return from_u32(u);
}

int64_t length_of(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(to_u32(v.as_string()).size());
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().size());
  if (v.is_undefined()) return 0;
  throw Error("length: a " + v.type_name() + " has no length");
}

ValueList items_of(const Value& v) {
  if (v.is_undefined()) return {};
  if (!v.is_dict()) throw Error("items expects a dict, got a " + v.type_name());
  ValueList out;
  for (const auto& [k, val] : v.as_dict()) out.emplace_back(ValueList{Value(k), val});
  return out;
}

// Looks up a dotted attribute path ("a.b") on an item, as Jinja's attribute= arguments.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = numeric && part.size() < 18 ? get_item(v, Value(static_cast<int64_t>(std::stoll(part)))) : get_attribute(v, part);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

CallArgs rest_args(const CallArgs& a, size_t from) {
  CallArgs r;
  for (size_t i = from; i < a.positional.size(); ++i) r.positional.push_back(a.positional[i]);
  return r;
}

Value bound_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    static const std::unordered_set<std::string> kStringMethods = {
        "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "lower", "upper", "title",
        "capitalize", "replace", "find", "count", "join", "isdigit", "isalpha", "isspace", "format"};
    if (!kStringMethods.count(name)) return Value();
    const std::string s = obj.as_string();
    return Value(Function([s, name](const CallArgs& a) -> Value {
      if (name == "startswith" || name == "endswith") {
        const Value& p = arg(a, 0, "prefix", name.c_str());
        ValueList options = p.is_list() ? p.as_list() : ValueList{p};
        for (const Value& o : options) {
          const std::string& x = need_string(o, name.c_str());
          const bool hit = name == "startswith" ? s.compare(0, x.size(), x) == 0
                                                : (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
          if (hit) return Value(true);
        }
        return Value(false);
      }
      if (name == "split" || name == "rsplit") {
        const Value* maxsplit = a.get(1, "maxsplit");
        const int64_t m = maxsplit && maxsplit->is_int() ? maxsplit->as_int() : -1;
        if (name == "rsplit" && m >= 0) throw Error("rsplit with maxsplit is not supported");
        return Value(split(s, a.get(0, "sep"), m));
      }
      if (name == "strip") return Value(strip(s, a.get(0, "chars"), true, true));
      if (name == "lstrip") return Value(strip(s, a.get(0, "chars"), true, false));
      if (name == "rstrip") return Value(strip(s, a.get(0, "chars"), false, true));
      if (name == "lower") return Value(change_case(s, 0));
      if (name == "upper") return Value(change_case(s, 1));
      if (name == "title") return Value(change_case(s, 2));
      if (name == "capitalize") return Value(change_case(s, 3));
      if (name == "replace") {
        const Value* count = a.get(2, "count");
        return Value(replace_all(s, string_arg(a, 0, "old", "replace"), string_arg(a, 1, "new", "replace"),
                                 count && count->is_int() ? count->as_int() : -1));
      }
      if (name == "find") {
        const size_t at = s.find(string_arg(a, 0, "sub", "find"));
        return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(to_u32(s.substr(0, at)).size()));
      }
      if (name == "count") {
        const std::string& x = string_arg(a, 0, "sub", "count");
        if (x.empty()) return Value(static_cast<int64_t>(to_u32(s).size() + 1));
        int64_t n = 0;
        for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
        return Value(n);
      }
      if (name == "join") {
        std::string out;
        const ValueList items = arg(a, 0, "iterable", "join").iterate();
        for (size_t i = 0; i < items.size(); ++i) out += (i ? s : "") + need_string(items[i], "join");
        return Value(out);
      }
      if (name == "isdigit" || name == "isalpha" || name == "isspace") {
        if (s.empty()) return Value(false);
        for (const char32_t c : to_u32(s)) {
          const bool ok = name == "isdigit" ? (c >= '0' && c <= '9')
                          : name == "isspace" ? is_python_space(c)
                                              : (c < 128 ? std::isalpha(static_cast<int>(c)) != 0 : true);
          if (!ok) return Value(false);
        }
        return Value(true);
      }
      throw Error("unsupported string method '" + name + "'");
    }));
  }
  if (obj.is_dict()) {
    const Value d = obj;
    if (name == "items") return Value(Function([d](const CallArgs&) { return Value(items_of(d)); }));
    if (name == "keys") return Value(Function([d](const CallArgs&) { return Value(d.iterate()); }));
    if (name == "values") {
      return Value(Function([d](const CallArgs&) {
        ValueList out;
        for (const auto& [k, v] : d.as_dict()) out.push_back(v);
        return Value(out);
      }));
    }
    if (name == "get") {
      return Value(Function([d](const CallArgs& a) {
        const Value& key = arg(a, 0, "key", "get");
        if (key.is_string()) {
          if (const Value* v = d.find_key(key.as_string())) return *v;
        }
        const Value* def = a.get(1, "default");
        return def ? *def : Value(None{});
      }));
    }
  }
  if (obj.is_list() && (name == "append" || name == "pop" || name == "extend" || name == "insert")) {
    throw Error("list." + name + " is not allowed: chat templates run in an immutable sandbox");
  }
  return Value();
}

bool run_test(const std::string& name, const Value& v, const CallArgs& a);

const std::unordered_set<std::string>& test_names() {
  static const std::unordered_set<std::string> names = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true", "false",
      "mapping", "iterable", "sequence", "callable", "even", "odd", "divisibleby", "eq", "equalto", "==", "ne", "!=",
      "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "sameas", "lower", "upper", "escaped"};
  return names;
}

bool run_test(const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict() || v.is_namespace();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "even" || name == "odd") {
    if (!v.is_int()) throw Error("test '" + name + "' needs an integer");
    return (v.as_int() % 2 == 0) == (name == "even");
  }
  if (name == "lower" || name == "upper") {
    const std::string& s = need_string(v, name.c_str());
    return s == change_case(s, name == "lower" ? 0 : 1);
  }
  const Value& other = arg(a, 0, "other", ("test '" + name + "'").c_str());
  if (name == "divisibleby") {
    if (!v.is_int() || !other.is_int() || other.as_int() == 0) throw Error("divisibleby needs non-zero integers");
    return v.as_int() % other.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.equals(other);
  if (name == "ne" || name == "!=") return !v.equals(other);
  if (name == "lt" || name == "<") return v.less_than(other);
  if (name == "le" || name == "<=") return !other.less_than(v);
  if (name == "gt" || name == ">") return other.less_than(v);
  if (name == "ge" || name == ">=") return !v.less_than(other);
  if (name == "in") return contains(other, v);
  if (name == "sameas") return v.equals(other) && v.type_name() == other.type_name();
  throw Error("unsupported test '" + name + "'");
}

const std::unordered_set<std::string>& filter_names() {
  static const std::unordered_set<std::string> names = {
      "tojson", "length", "count", "trim", "upper", "lower", "title", "capitalize", "default", "d", "join",
      "first", "last", "list", "string", "int", "float", "abs", "replace", "safe", "items", "dictsort", "reverse",
      "sort", "unique", "map", "select", "reject", "selectattr", "rejectattr", "indent", "round", "e", "escape",
      "min", "max", "sum", "wordcount", "batch", "attr"};
  return names;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

bool has_filter(const std::string& name) { return filter_names().count(name) != 0; }
bool has_test(const std::string& name) { return test_names().count(name) != 0; }
bool apply_test(const std::string& name, const Value& value, const CallArgs& args) { return run_test(name, value, args); }

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
  if ((obj.is_list() || obj.is_string()) && key.is_int()) {
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.as_list().size());
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("index " + std::to_string(key.as_int()));
      return obj.as_list()[static_cast<size_t>(i)];
    }
    const std::u32string u = to_u32(obj.as_string());
    const auto n = static_cast<int64_t>(u.size());
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("index " + std::to_string(key.as_int()));
    return Value(from_u32(std::u32string_view(&u[static_cast<size_t>(i)], 1)));
  }
  if (key.is_string()) return bound_method(obj, key.as_string());
  return Value();
}

Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop, std::optional<int64_t> step) {
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
  if (container.is_string()) return container.as_string().find(need_string(item, "'in' on a string")) != std::string::npos;
  if (container.is_list()) {
    for (const Value& v : container.as_list()) {
      if (v.equals(item)) return true;
    }
    return false;
  }
  if (container.is_dict() || container.is_namespace()) return item.is_string() && container.find_key(item.as_string()) != nullptr;
  if (container.is_undefined()) return false;
  throw Error("'in' needs a string, list or dict on its right, got a " + container.type_name());
}

Value apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "tojson") {
    const Value* indent = a.get(0, "indent");
    return Value(v.to_json(indent && indent->is_int() ? static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64)) : -1));
  }
  if (name == "length" || name == "count") return Value(length_of(v));
  if (name == "trim") return Value(strip(need_string(v, "trim"), a.get(0, "chars"), true, true));
  if (name == "upper") return Value(change_case(need_string(v, "upper"), 1));
  if (name == "lower") return Value(change_case(need_string(v, "lower"), 0));
  if (name == "title") return Value(change_case(need_string(v, "title"), 2));
  if (name == "capitalize") return Value(change_case(need_string(v, "capitalize"), 3));
  if (name == "default" || name == "d") {
    const Value* fallback = a.get(0, "default_value");
    const Value* boolean = a.get(1, "boolean");
    const bool use = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
    return use ? (fallback ? *fallback : Value(std::string())) : v;
  }
  if (name == "join") {
    const Value* sep = a.get(0, "d");
    const Value* attribute = a.get(1, "attribute");
    std::string out;
    const ValueList items = v.iterate();
    for (size_t i = 0; i < items.size(); ++i) {
      if (i && sep) out += sep->to_output();
      out += (attribute ? attribute_path(items[i], attribute->to_output()) : items[i]).to_output();
    }
    return Value(out);
  }
  if (name == "first" || name == "last") {
    const ValueList items = v.iterate();
    if (items.empty()) return Value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value(v.iterate());
  if (name == "string") return Value(v.to_output());
  if (name == "safe" || name == "attr") return name == "attr" ? get_attribute(v, string_arg(a, 0, "name", "attr")) : v;
  if (name == "e" || name == "escape") return Value(html_escape(v.to_output()));
  if (name == "int") {
    if (v.is_int()) return v;
    if (v.is_float()) {
      const double d = v.as_number();
      if (!(d > -9.2e18 && d < 9.2e18)) throw Error("int: " + python_float_repr(d) + " does not fit an integer");
      return Value(static_cast<int64_t>(d));
    }
    if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
    if (v.is_string()) {
      try {
        return Value(static_cast<int64_t>(std::stoll(v.as_string())));
      } catch (const std::exception&) {
      }
    }
    const Value* def = a.get(0, "default");
    return def ? *def : Value(int64_t{0});
  }
  if (name == "float") {
    if (v.is_number() || v.is_bool()) return Value(v.as_number());
    if (v.is_string()) {
      try {
        return Value(std::stod(v.as_string()));
      } catch (const std::exception&) {
      }
    }
    const Value* def = a.get(0, "default");
    return def ? *def : Value(0.0);
  }
  if (name == "abs") {
    if (v.is_int()) return Value(v.as_int() < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(v.as_int())) : v.as_int());
    if (v.is_float()) return Value(std::fabs(v.as_number()));
    throw Error("abs needs a number");
  }
  if (name == "round") {
    const Value* precision = a.get(0, "precision");
    const double scale = std::pow(10.0, precision && precision->is_int() ? static_cast<double>(precision->as_int()) : 0.0);
    return Value(std::nearbyint(v.as_number() * scale) / scale);
  }
  if (name == "replace") {
    const Value* count = a.get(2, "count");
    return Value(replace_all(need_string(v, "replace"), string_arg(a, 0, "old", "replace"), string_arg(a, 1, "new", "replace"),
                             count && count->is_int() ? count->as_int() : -1));
  }
  if (name == "items") return Value(items_of(v));
  if (name == "dictsort") {
    ValueList items = items_of(v);
    std::stable_sort(items.begin(), items.end(), [](const Value& x, const Value& y) { return x.as_list()[0].less_than(y.as_list()[0]); });
    return Value(items);
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string u = to_u32(v.as_string());
      std::reverse(u.begin(), u.end());
      return Value(from_u32(u));
    }
    ValueList items = v.iterate();
    std::reverse(items.begin(), items.end());
    return Value(items);
  }
  if (name == "sort") {
    ValueList items = v.iterate();
    const Value* reverse = a.get(0, "reverse");
    const Value* attribute = a.get(2, "attribute");
    auto key = [&](const Value& x) { return attribute ? attribute_path(x, attribute->to_output()) : x; };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) { return key(x).less_than(key(y)); });
    if (reverse && reverse->truthy()) std::reverse(items.begin(), items.end());
    return Value(items);
  }
  if (name == "unique") {
    ValueList out;
    for (const Value& x : v.iterate()) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return y.equals(x); })) out.push_back(x);
    }
    return Value(out);
  }
  if (name == "min" || name == "max" || name == "sum") {
    const ValueList items = v.iterate();
    if (name == "sum") {
      Value total(int64_t{0});
      for (const Value& x : items) {
        if (!x.is_number()) throw Error("sum needs numbers");
        total = total.is_int() && x.is_int()
                    ? Value(static_cast<int64_t>(static_cast<uint64_t>(total.as_int()) + static_cast<uint64_t>(x.as_int())))
                    : Value(total.as_number() + x.as_number());
      }
      return total;
    }
    if (items.empty()) return Value::undefined(name);
    Value best = items[0];
    for (const Value& x : items) {
      if (name == "min" ? x.less_than(best) : best.less_than(x)) best = x;
    }
    return best;
  }
  if (name == "wordcount") return Value(static_cast<int64_t>(split(need_string(v, "wordcount"), nullptr, -1).size()));
  if (name == "map") {
    ValueList out;
    const Value* attribute = a.get(99, "attribute");
    for (const Value& x : v.iterate()) {
      if (attribute) {
        Value got = attribute_path(x, attribute->to_output());
        if (got.is_undefined()) {
          if (const Value* def = a.get(99, "default")) got = *def;
        }
        out.push_back(got);
      } else {
        const std::string& filter = string_arg(a, 0, "filter", "map");
        if (!has_filter(filter) || filter == "map") throw Error("map: unsupported filter '" + filter + "'");
        out.push_back(apply_filter(filter, x, rest_args(a, 1)));
      }
    }
    return Value(out);
  }
  if (name == "select" || name == "reject") {
    ValueList out;
    for (const Value& x : v.iterate()) {
      const bool pass = a.positional.empty() ? x.truthy() : run_test(string_arg(a, 0, "test", name.c_str()), x, rest_args(a, 1));
      if (pass == (name == "select")) out.push_back(x);
    }
    return Value(out);
  }
  if (name == "selectattr" || name == "rejectattr") {
    ValueList out;
    const std::string& attribute = string_arg(a, 0, "attribute", name.c_str());
    for (const Value& x : v.iterate()) {
      const Value field = attribute_path(x, attribute);
      const bool pass = a.positional.size() < 2 ? field.truthy()
                                                 : run_test(string_arg(a, 1, "test", name.c_str()), field, rest_args(a, 2));
      if (pass == (name == "selectattr")) out.push_back(x);
    }
    return Value(out);
  }
  if (name == "indent") {
    const Value* width_v = a.get(0, "width");
    const Value* first_v = a.get(1, "first");
    const Value* blank_v = a.get(2, "blank");
    const std::string pad = width_v && width_v->is_string() ? width_v->as_string()
                                                            : std::string(static_cast<size_t>(width_v && width_v->is_int() ? std::clamp<int64_t>(width_v->as_int(), 0, 256) : 4), ' ');
    const ValueList lines = split(need_string(v, "indent"), nullptr, -1);
    std::string s = need_string(v, "indent"), out;
    size_t start = 0;
    bool first_line = true;
    while (true) {
      const size_t nl = s.find('\n', start);
      const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      const bool indent_it = first_line ? (first_v && first_v->truthy()) : (!line.empty() || (blank_v && blank_v->truthy()));
      if (indent_it) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      first_line = false;
    }
    return Value(out);
  }
  if (name == "batch") throw Error("unsupported filter 'batch'");
  throw Error("unsupported filter '" + name + "'");
}

std::optional<Value> global_function(const std::string& name) {
  if (name == "namespace") {
    return Value(Function([](const CallArgs& a) -> Value {
      auto ns = std::make_shared<Namespace>();
      for (const Value& p : a.positional) {
        if (!p.is_dict()) throw Error("namespace() takes keyword arguments or a dict");
        ns->attributes = p.as_dict();
      }
      for (const auto& [k, v] : a.keyword) ns->attributes.emplace_back(k, v);
      return Value(ns);
    }));
  }
  if (name == "range") {
    return Value(Function([](const CallArgs& a) -> Value {
      int64_t start = 0, stop = 0, step = 1;
      for (const Value& p : a.positional) {
        if (!p.is_int()) throw Error("range() takes integers");
      }
      if (a.positional.size() == 1) {
        stop = a.positional[0].as_int();
      } else if (a.positional.size() >= 2) {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() >= 3) step = a.positional[2].as_int();
      } else {
        throw Error("range() needs arguments");
      }
      if (step == 0) throw Error("range() step cannot be zero");
      ValueList out;
      for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (out.size() >= 100000) throw Error("range() is too long");
        out.emplace_back(static_cast<int64_t>(i));
      }
      return Value(out);
    }));
  }
  if (name == "raise_exception") {
    return Value(Function([](const CallArgs& a) -> Value {
      throw Error("template raised an exception: " + (a.positional.empty() ? std::string() : a.positional[0].to_output()));
    }));
  }
  if (name == "strftime_now") {
    return Value(Function([](const CallArgs& a) -> Value {
      const std::string& format = string_arg(a, 0, "format", "strftime_now");
      const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
      return Value(std::string(buf, n));
    }));
  }
  if (name == "dict") {
    return Value(Function([](const CallArgs& a) -> Value {
      ValueDict d;
      for (const auto& [k, v] : a.keyword) d.emplace_back(k, v);
      return Value(d);
    }));
  }
  return std::nullopt;
}

}  // namespace nanovllm::jinja
