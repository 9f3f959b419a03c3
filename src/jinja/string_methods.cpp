// Python's str methods that chat templates call: startswith, split, strip, replace, join, ...
#include <cctype>
#include <string_view>
#include <unordered_map>

#include "jinja/arguments.h"
#include "jinja/methods.h"
#include "jinja/python_str.h"

namespace nanovllm::jinja {
namespace {

using StringMethod = Value (*)(const std::string& s, const CallArgs& a);

// startswith / endswith: the argument may be one string or a tuple of them.
Value has_affix(const std::string& s, const CallArgs& a, const char* name, bool at_start) {
  const Value& p = arg(a, 0, "prefix", name);
  const ValueList options = p.is_list() ? p.as_list() : ValueList{p};
  for (const Value& o : options) {
    const std::string& x = need_string(o, name);
    const bool hit = at_start ? s.compare(0, x.size(), x) == 0
                              : (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
    if (hit) return Value(true);
  }
  return Value(false);
}

Value startswith(const std::string& s, const CallArgs& a) { return has_affix(s, a, "startswith", true); }
Value endswith(const std::string& s, const CallArgs& a) { return has_affix(s, a, "endswith", false); }

Value split_into_values(const std::string& s, const CallArgs& a, int64_t maxsplit) {
  ValueList parts;
  for (std::string& part : split(s, optional_string(a.get(0, "sep"), "split"), maxsplit))
    parts.emplace_back(std::move(part));
  return Value(std::move(parts));
}

Value split_method(const std::string& s, const CallArgs& a) {
  return split_into_values(s, a, int_or(a.get(1, "maxsplit"), -1));
}

Value rsplit(const std::string& s, const CallArgs& a) {
  const int64_t maxsplit = int_or(a.get(1, "maxsplit"), -1);
  if (maxsplit >= 0) throw Error("rsplit with maxsplit is not supported");
  return split_into_values(s, a, maxsplit);
}

const std::string* strip_chars(const CallArgs& a) { return optional_string(a.get(0, "chars"), "strip"); }
Value strip_method(const std::string& s, const CallArgs& a) { return Value(strip(s, strip_chars(a), true, true)); }
Value lstrip(const std::string& s, const CallArgs& a) { return Value(strip(s, strip_chars(a), true, false)); }
Value rstrip(const std::string& s, const CallArgs& a) { return Value(strip(s, strip_chars(a), false, true)); }

Value lower(const std::string& s, const CallArgs&) { return Value(change_case(s, Case::kLower)); }
Value upper(const std::string& s, const CallArgs&) { return Value(change_case(s, Case::kUpper)); }
Value title(const std::string& s, const CallArgs&) { return Value(change_case(s, Case::kTitle)); }
Value capitalize(const std::string& s, const CallArgs&) { return Value(change_case(s, Case::kCapitalize)); }

Value replace(const std::string& s, const CallArgs& a) {
  const std::string& from = string_arg(a, 0, "old", "replace");
  const std::string& to = string_arg(a, 1, "new", "replace");
  return Value(replace_all(s, from, to, int_or(a.get(2, "count"), -1)));
}

// The index in code points, as Python counts; -1 when absent.
Value find(const std::string& s, const CallArgs& a) {
  const size_t at = s.find(string_arg(a, 0, "sub", "find"));
  return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(to_u32(s.substr(0, at)).size()));
}

Value count(const std::string& s, const CallArgs& a) {
  const std::string& x = string_arg(a, 0, "sub", "count");
  if (x.empty()) return Value(static_cast<int64_t>(to_u32(s).size() + 1));
  int64_t n = 0;
  for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
  return Value(n);
}

Value join(const std::string& s, const CallArgs& a) {
  std::string out;
  const ValueList items = arg(a, 0, "iterable", "join").iterate();
  for (size_t i = 0; i < items.size(); ++i) out += (i ? s : "") + need_string(items[i], "join");
  return Value(out);
}

// isdigit / isalpha / isspace: false for the empty string, as Python.
template <typename Predicate>
Value all_chars(const std::string& s, Predicate is) {
  if (s.empty()) return Value(false);
  for (const char32_t c : to_u32(s)) {
    if (!is(c)) return Value(false);
  }
  return Value(true);
}

Value is_digit(const std::string& s, const CallArgs&) {
  return all_chars(s, [](char32_t c) { return c >= '0' && c <= '9'; });
}
Value is_alpha(const std::string& s, const CallArgs&) {
  return all_chars(s, [](char32_t c) { return c < 128 ? std::isalpha(static_cast<int>(c)) != 0 : true; });
}
Value is_space(const std::string& s, const CallArgs&) { return all_chars(s, is_python_space); }

// str.format is known (so `x.format is defined` holds) but calling it is outside the subset.
Value format(const std::string&, const CallArgs&) { throw Error("unsupported string method 'format'"); }

const std::unordered_map<std::string_view, StringMethod> kStringMethods = {{"startswith", startswith},
                                                                           {"endswith", endswith},
                                                                           {"split", split_method},
                                                                           {"rsplit", rsplit},
                                                                           {"strip", strip_method},
                                                                           {"lstrip", lstrip},
                                                                           {"rstrip", rstrip},
                                                                           {"lower", lower},
                                                                           {"upper", upper},
                                                                           {"title", title},
                                                                           {"capitalize", capitalize},
                                                                           {"replace", replace},
                                                                           {"find", find},
                                                                           {"count", count},
                                                                           {"join", join},
                                                                           {"isdigit", is_digit},
                                                                           {"isalpha", is_alpha},
                                                                           {"isspace", is_space},
                                                                           {"format", format}};

}  // namespace

Value string_method(const std::string& s, const std::string& name) {
  const auto it = kStringMethods.find(name);
  if (it == kStringMethods.end()) return Value();
  const StringMethod method = it->second;
  return Value(Function([s, method](const CallArgs& a) { return method(s, a); }));
}

}  // namespace nanovllm::jinja
