#include "jinja/predicates.h"

#include <string_view>
#include <unordered_map>

#include "jinja/access.h"
#include "jinja/arguments.h"
#include "jinja/python_str.h"

namespace nanovllm::jinja {
namespace {

using UnaryTest = bool (*)(const Value& v);
using BinaryTest = bool (*)(const Value& v, const Value& other);

bool defined(const Value& v) { return !v.is_undefined(); }
bool undefined(const Value& v) { return v.is_undefined(); }
bool none(const Value& v) { return v.is_none(); }
bool string(const Value& v) { return v.is_string(); }
bool number(const Value& v) { return v.is_number(); }
bool integer(const Value& v) { return v.is_int(); }
bool floating(const Value& v) { return v.is_float(); }
bool boolean(const Value& v) { return v.is_bool(); }
bool is_true(const Value& v) { return v.is_bool() && v.as_bool(); }
bool is_false(const Value& v) { return v.is_bool() && !v.as_bool(); }
bool mapping(const Value& v) { return v.is_dict() || v.is_namespace(); }
bool iterable(const Value& v) { return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined(); }
bool sequence(const Value& v) { return v.is_list() || v.is_dict() || v.is_string(); }
bool callable(const Value& v) { return v.is_callable(); }
bool escaped(const Value&) { return false; }  // no markup-safe strings here

int64_t need_int(const Value& v, const char* test) {
  if (!v.is_int()) throw Error("test '" + std::string(test) + "' needs an integer");
  return v.as_int();
}
bool even(const Value& v) { return need_int(v, "even") % 2 == 0; }
bool odd(const Value& v) { return need_int(v, "odd") % 2 != 0; }

bool lower(const Value& v) {
  const std::string& s = need_string(v, "lower");
  return s == change_case(s, Case::kLower);
}
bool upper(const Value& v) {
  const std::string& s = need_string(v, "upper");
  return s == change_case(s, Case::kUpper);
}

bool divisibleby(const Value& v, const Value& other) {
  if (!v.is_int() || !other.is_int() || other.as_int() == 0) throw Error("divisibleby needs non-zero integers");
  return v.as_int() % other.as_int() == 0;
}
bool eq(const Value& v, const Value& other) { return v.equals(other); }
bool ne(const Value& v, const Value& other) { return !v.equals(other); }
bool lt(const Value& v, const Value& other) { return v.less_than(other); }
bool le(const Value& v, const Value& other) { return !other.less_than(v); }
bool gt(const Value& v, const Value& other) { return other.less_than(v); }
bool ge(const Value& v, const Value& other) { return !v.less_than(other); }
bool in(const Value& v, const Value& other) { return contains(other, v); }
bool sameas(const Value& v, const Value& other) { return v.equals(other) && v.type_name() == other.type_name(); }

const std::unordered_map<std::string_view, UnaryTest> kUnaryTests = {
    {"defined", defined},   {"undefined", undefined}, {"none", none},       {"string", string},
    {"number", number},     {"integer", integer},     {"float", floating},  {"boolean", boolean},
    {"true", is_true},      {"false", is_false},      {"mapping", mapping}, {"iterable", iterable},
    {"sequence", sequence}, {"callable", callable},   {"escaped", escaped}, {"even", even},
    {"odd", odd},           {"lower", lower},         {"upper", upper}};

const std::unordered_map<std::string_view, BinaryTest> kBinaryTests = {{"divisibleby", divisibleby},
                                                                       {"eq", eq},
                                                                       {"equalto", eq},
                                                                       {"==", eq},
                                                                       {"ne", ne},
                                                                       {"!=", ne},
                                                                       {"lt", lt},
                                                                       {"<", lt},
                                                                       {"le", le},
                                                                       {"<=", le},
                                                                       {"gt", gt},
                                                                       {">", gt},
                                                                       {"ge", ge},
                                                                       {">=", ge},
                                                                       {"in", in},
                                                                       {"sameas", sameas}};

}  // namespace

bool has_test(const std::string& name) { return kUnaryTests.count(name) != 0 || kBinaryTests.count(name) != 0; }

bool apply_test(const std::string& name, const Value& value, const CallArgs& args) {
  if (const auto unary = kUnaryTests.find(name); unary != kUnaryTests.end()) return unary->second(value);
  const auto binary = kBinaryTests.find(name);
  if (binary == kBinaryTests.end()) throw Error("unsupported test '" + name + "'");
  return binary->second(value, arg(args, 0, "other", ("test '" + name + "'").c_str()));
}

}  // namespace nanovllm::jinja
