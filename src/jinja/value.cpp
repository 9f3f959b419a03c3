#include "jinja/value.h"

#include <charconv>
#include <cmath>

#include "jinja/python_str.h"

namespace nanovllm::jinja {

const Value* CallArgs::get(size_t index, std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return index < positional.size() ? &positional[index] : nullptr;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value(None{});
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      for (const auto& e : j) items.push_back(from_json(e));
      return Value(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict items;
      for (const auto& [k, v] : j.items()) items.emplace_back(k, from_json(v));
      return Value(std::move(items));
    }
    default:
      return Value();
  }
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return std::get<double>(v_) != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  if (is_dict()) return !as_dict().empty();
  return true;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Python switches to exponent notation below 1e-4 and from 1e16.
  const double a = std::fabs(d);
  const bool scientific = a != 0.0 && (a < 1e-4 || a >= 1e16);
  auto r =
      std::to_chars(buf, buf + sizeof(buf), d, scientific ? std::chars_format::scientific : std::chars_format::fixed);
  std::string s(buf, r.ptr);
  if (scientific) {
    // to_chars writes e-05 / e+16 already in Python's form.
    return s;
  }
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<uint8_t>(c) < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(static_cast<uint8_t>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<uint8_t>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void to_json_impl(const Value& v, std::string& out, int indent, int depth) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  if (v.is_undefined() || v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    const double d = v.as_number();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : python_float_repr(d);
  } else if (v.is_string()) {
    json_string(out, v.as_string());
  } else if (v.is_list()) {
    const ValueList& l = v.as_list();
    if (l.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < l.size(); ++i) {
      if (i) out += item_sep;
      newline(depth + 1);
      to_json_impl(l[i], out, indent, depth + 1);
    }
    newline(depth);
    out += ']';
  } else if (v.is_dict() || v.is_namespace()) {
    const ValueDict& d = v.is_dict() ? v.as_dict() : v.as_namespace().attributes;
    if (d.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < d.size(); ++i) {
      if (i) out += item_sep;
      newline(depth + 1);
      json_string(out, d[i].first);
      out += ": ";
      to_json_impl(d[i].second, out, indent, depth + 1);
    }
    newline(depth);
    out += '}';
  } else {
    throw Error("tojson cannot serialize a " + v.type_name());
  }
}

}  // namespace

std::string Value::repr() const {
  if (is_string()) return python_string_repr(as_string());
  if (is_list()) {
    std::string out = "[";
    const ValueList& l = as_list();
    for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + l[i].repr();
    return out + "]";
  }
  if (is_dict()) {
    std::string out = "{";
    const ValueDict& d = as_dict();
    for (size_t i = 0; i < d.size(); ++i)
      out += (i ? ", " : "") + python_string_repr(d[i].first) + ": " + d[i].second.repr();
    return out + "}";
  }
  return to_output();
}

std::string Value::to_output() const {
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return python_float_repr(as_number());
  if (is_string()) return as_string();
  if (is_list() || is_dict()) return repr();
  if (is_namespace()) return "<Namespace>";
  return "<function>";
}

std::string Value::to_json(int indent) const {
  std::string out;
  to_json_impl(*this, out, indent, 0);
  return out;
}

bool Value::equals(const Value& o) const {
  if ((is_number() || is_bool()) && (o.is_number() || o.is_bool())) {
    if ((is_int() || is_bool()) && (o.is_int() || o.is_bool())) {
      return (is_bool() ? as_bool() : as_int()) == (o.is_bool() ? o.as_bool() : o.as_int());
    }
    return as_number() == o.as_number();
  }
  if (v_.index() != o.v_.index()) return false;
  if (is_undefined() || is_none()) return true;
  if (is_string()) return as_string() == o.as_string();
  if (is_list()) {
    const ValueList &a = as_list(), &b = o.as_list();
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].equals(b[i])) return false;
    }
    return true;
  }
  if (is_dict()) {
    const ValueDict &a = as_dict(), &b = o.as_dict();
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a) {
      const Value* other = o.find_key(k);
      if (!other || !v.equals(*other)) return false;
    }
    return true;
  }
  if (is_namespace()) return &as_namespace() == &o.as_namespace();
  return &as_function() == &o.as_function();
}

bool Value::less_than(const Value& o) const {
  if ((is_number() || is_bool()) && (o.is_number() || o.is_bool())) return as_number() < o.as_number();
  if (is_string() && o.is_string()) return to_u32(as_string()) < to_u32(o.as_string());
  if (is_list() && o.is_list()) {
    const ValueList &a = as_list(), &b = o.as_list();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (a[i].less_than(b[i])) return true;
      if (b[i].less_than(a[i])) return false;
    }
    return a.size() < b.size();
  }
  throw Error("cannot order " + type_name() + " and " + o.type_name());
}

std::string Value::type_name() const {
  static const char* names[] = {"undefined", "none", "bool", "int",       "float",
                                "string",    "list", "dict", "namespace", "function"};
  return names[v_.index()];
}

ValueList Value::iterate() const {
  if (is_list()) return as_list();
  if (is_undefined()) return {};
  if (is_dict()) {
    ValueList keys;
    for (const auto& [k, v] : as_dict()) keys.emplace_back(k);
    return keys;
  }
  if (is_string()) {
    ValueList chars;
    for (const char32_t c : to_u32(as_string())) chars.emplace_back(from_u32(std::u32string_view(&c, 1)));
    return chars;
  }
  throw Error("a " + type_name() + " is not iterable");
}

const Value* Value::find_key(std::string_view key) const {
  const ValueDict* d = is_dict() ? &as_dict() : is_namespace() ? &as_namespace().attributes : nullptr;
  if (!d) return nullptr;
  for (const auto& [k, v] : *d) {
    if (k == key) return &v;
  }
  return nullptr;
}

}  // namespace nanovllm::jinja
