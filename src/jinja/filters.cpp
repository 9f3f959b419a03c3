#include "jinja/filters.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "jinja/access.h"
#include "jinja/arguments.h"
#include "jinja/predicates.h"
#include "jinja/python_str.h"

namespace nanovllm::jinja {
namespace {

using Filter = Value (*)(const Value& v, const CallArgs& a);

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------------- strings

Value tojson(const Value& v, const CallArgs& a) {
  const Value* indent = a.get(0, "indent");
  return Value(
      v.to_json(indent && indent->is_int() ? static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64)) : -1));
}

Value trim(const Value& v, const CallArgs& a) {
  const std::string& s = need_string(v, "trim");
  return Value(strip(s, optional_string(a.get(0, "chars"), "strip"), true, true));
}

Value upper(const Value& v, const CallArgs&) { return Value(change_case(need_string(v, "upper"), Case::kUpper)); }
Value lower(const Value& v, const CallArgs&) { return Value(change_case(need_string(v, "lower"), Case::kLower)); }
Value title(const Value& v, const CallArgs&) { return Value(change_case(need_string(v, "title"), Case::kTitle)); }
Value capitalize(const Value& v, const CallArgs&) {
  return Value(change_case(need_string(v, "capitalize"), Case::kCapitalize));
}
Value string(const Value& v, const CallArgs&) { return Value(v.to_output()); }
Value escape(const Value& v, const CallArgs&) { return Value(html_escape(v.to_output())); }
Value safe(const Value& v, const CallArgs&) { return v; }
Value attr(const Value& v, const CallArgs& a) { return get_attribute(v, string_arg(a, 0, "name", "attr")); }

Value replace(const Value& v, const CallArgs& a) {
  const std::string& s = need_string(v, "replace");
  const std::string& from = string_arg(a, 0, "old", "replace");
  const std::string& to = string_arg(a, 1, "new", "replace");
  return Value(replace_all(s, from, to, int_or(a.get(2, "count"), -1)));
}

Value wordcount(const Value& v, const CallArgs&) {
  return Value(static_cast<int64_t>(split(need_string(v, "wordcount"), nullptr, -1).size()));
}

// indent(width=4, first=False, blank=False); width may also be the padding string itself.
Value indent(const Value& v, const CallArgs& a) {
  const Value* width_v = a.get(0, "width");
  const Value* first_v = a.get(1, "first");
  const Value* blank_v = a.get(2, "blank");
  const std::string pad = width_v && width_v->is_string()
                              ? width_v->as_string()
                              : std::string(static_cast<size_t>(std::clamp<int64_t>(int_or(width_v, 4), 0, 256)), ' ');
  const std::string& s = need_string(v, "indent");
  std::string out;
  size_t start = 0;
  bool first_line = true;
  while (true) {
    const size_t nl = s.find('\n', start);
    const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    const bool indent_it =
        first_line ? (first_v && first_v->truthy()) : (!line.empty() || (blank_v && blank_v->truthy()));
    if (indent_it) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    first_line = false;
  }
  return Value(out);
}

// ------------------------------------------------------------------------------------ conversions

Value default_value(const Value& v, const CallArgs& a) {
  const Value* fallback = a.get(0, "default_value");
  const Value* boolean = a.get(1, "boolean");
  const bool use = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
  return use ? (fallback ? *fallback : Value(std::string())) : v;
}

Value to_int(const Value& v, const CallArgs& a) {
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

Value to_float(const Value& v, const CallArgs& a) {
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

Value abs(const Value& v, const CallArgs&) {
  if (v.is_int())
    return Value(v.as_int() < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(v.as_int())) : v.as_int());
  if (v.is_float()) return Value(std::fabs(v.as_number()));
  throw Error("abs needs a number");
}

Value round(const Value& v, const CallArgs& a) {
  const Value* precision = a.get(0, "precision");
  const double scale =
      std::pow(10.0, precision && precision->is_int() ? static_cast<double>(precision->as_int()) : 0.0);
  return Value(std::nearbyint(v.as_number() * scale) / scale);
}

// ------------------------------------------------------------------------------------- sequences

Value length(const Value& v, const CallArgs&) {
  if (v.is_string()) return Value(static_cast<int64_t>(to_u32(v.as_string()).size()));
  if (v.is_list()) return Value(static_cast<int64_t>(v.as_list().size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.as_dict().size()));
  if (v.is_undefined()) return Value(int64_t{0});
  throw Error("length: a " + v.type_name() + " has no length");
}

Value join(const Value& v, const CallArgs& a) {
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

Value first(const Value& v, const CallArgs&) {
  const ValueList items = v.iterate();
  return items.empty() ? Value::undefined("first") : items.front();
}

Value last(const Value& v, const CallArgs&) {
  const ValueList items = v.iterate();
  return items.empty() ? Value::undefined("last") : items.back();
}

Value list(const Value& v, const CallArgs&) { return Value(v.iterate()); }
Value items(const Value& v, const CallArgs&) { return Value(items_of(v)); }

Value dictsort(const Value& v, const CallArgs&) {
  ValueList pairs = items_of(v);
  std::stable_sort(pairs.begin(), pairs.end(),
                   [](const Value& x, const Value& y) { return x.as_list()[0].less_than(y.as_list()[0]); });
  return Value(pairs);
}

Value reverse(const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::u32string u = to_u32(v.as_string());
    std::reverse(u.begin(), u.end());
    return Value(from_u32(u));
  }
  ValueList items = v.iterate();
  std::reverse(items.begin(), items.end());
  return Value(items);
}

// sort(reverse=False, case_sensitive=False, attribute=None); stable as Python's sorted.
Value sort(const Value& v, const CallArgs& a) {
  ValueList items = v.iterate();
  const Value* reverse = a.get(0, "reverse");
  const Value* attribute = a.get(2, "attribute");
  auto key = [&](const Value& x) { return attribute ? attribute_path(x, attribute->to_output()) : x; };
  std::stable_sort(items.begin(), items.end(),
                   [&](const Value& x, const Value& y) { return key(x).less_than(key(y)); });
  if (reverse && reverse->truthy()) std::reverse(items.begin(), items.end());
  return Value(items);
}

Value unique(const Value& v, const CallArgs&) {
  ValueList out;
  for (const Value& x : v.iterate()) {
    if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return y.equals(x); })) out.push_back(x);
  }
  return Value(out);
}

// min / max: the first of the extreme items; undefined for an empty sequence.
Value extreme(const Value& v, const char* name, bool want_min) {
  const ValueList items = v.iterate();
  if (items.empty()) return Value::undefined(name);
  Value best = items[0];
  for (const Value& x : items) {
    if (want_min ? x.less_than(best) : best.less_than(x)) best = x;
  }
  return best;
}

Value min(const Value& v, const CallArgs&) { return extreme(v, "min", true); }
Value max(const Value& v, const CallArgs&) { return extreme(v, "max", false); }

Value sum(const Value& v, const CallArgs&) {
  Value total(int64_t{0});
  for (const Value& x : v.iterate()) {
    if (!x.is_number()) throw Error("sum needs numbers");
    total = total.is_int() && x.is_int()
                ? Value(static_cast<int64_t>(static_cast<uint64_t>(total.as_int()) + static_cast<uint64_t>(x.as_int())))
                : Value(total.as_number() + x.as_number());
  }
  return total;
}

// map(attribute='a', default=d) or map('filter', args...).
Value map(const Value& v, const CallArgs& a) {
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

// select / reject: items whose test (truthiness when none is named) passes / fails.
Value select_items(const Value& v, const CallArgs& a, const char* name, bool keep_passing) {
  ValueList out;
  for (const Value& x : v.iterate()) {
    const bool pass =
        a.positional.empty() ? x.truthy() : apply_test(string_arg(a, 0, "test", name), x, rest_args(a, 1));
    if (pass == keep_passing) out.push_back(x);
  }
  return Value(out);
}

Value select(const Value& v, const CallArgs& a) { return select_items(v, a, "select", true); }
Value reject(const Value& v, const CallArgs& a) { return select_items(v, a, "reject", false); }

// selectattr / rejectattr: the same on an attribute of each item.
Value select_by_attribute(const Value& v, const CallArgs& a, const char* name, bool keep_passing) {
  ValueList out;
  const std::string& attribute = string_arg(a, 0, "attribute", name);
  for (const Value& x : v.iterate()) {
    const Value field = attribute_path(x, attribute);
    const bool pass =
        a.positional.size() < 2 ? field.truthy() : apply_test(string_arg(a, 1, "test", name), field, rest_args(a, 2));
    if (pass == keep_passing) out.push_back(x);
  }
  return Value(out);
}

Value selectattr(const Value& v, const CallArgs& a) { return select_by_attribute(v, a, "selectattr", true); }
Value rejectattr(const Value& v, const CallArgs& a) { return select_by_attribute(v, a, "rejectattr", false); }

// Known to the parser so templates that only mention it in an untaken branch still load.
Value batch(const Value&, const CallArgs&) { throw Error("unsupported filter 'batch'"); }

const std::unordered_map<std::string_view, Filter> kFilters = {{"tojson", tojson},
                                                               {"length", length},
                                                               {"count", length},
                                                               {"trim", trim},
                                                               {"upper", upper},
                                                               {"lower", lower},
                                                               {"title", title},
                                                               {"capitalize", capitalize},
                                                               {"default", default_value},
                                                               {"d", default_value},
                                                               {"join", join},
                                                               {"first", first},
                                                               {"last", last},
                                                               {"list", list},
                                                               {"string", string},
                                                               {"int", to_int},
                                                               {"float", to_float},
                                                               {"abs", abs},
                                                               {"replace", replace},
                                                               {"safe", safe},
                                                               {"items", items},
                                                               {"dictsort", dictsort},
                                                               {"reverse", reverse},
                                                               {"sort", sort},
                                                               {"unique", unique},
                                                               {"map", map},
                                                               {"select", select},
                                                               {"reject", reject},
                                                               {"selectattr", selectattr},
                                                               {"rejectattr", rejectattr},
                                                               {"indent", indent},
                                                               {"round", round},
                                                               {"e", escape},
                                                               {"escape", escape},
                                                               {"min", min},
                                                               {"max", max},
                                                               {"sum", sum},
                                                               {"wordcount", wordcount},
                                                               {"batch", batch},
                                                               {"attr", attr}};

}  // namespace

bool has_filter(const std::string& name) { return kFilters.count(name) != 0; }

Value apply_filter(const std::string& name, const Value& value, const CallArgs& args) {
  const auto it = kFilters.find(name);
  if (it == kFilters.end()) throw Error("unsupported filter '" + name + "'");
  return it->second(value, args);
}

}  // namespace nanovllm::jinja
