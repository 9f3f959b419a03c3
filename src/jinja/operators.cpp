// Python's operators on jinja::Value: arithmetic (64-bit integers wrap instead of overflowing), string and list
// concatenation, string repetition, comparisons chained as in Python, and the boolean operators.
#include <cmath>
#include <optional>

#include "jinja/access.h"
#include "jinja/ast.h"
#include "jinja/context.h"

namespace nanovllm::jinja {
namespace {

int64_t wrapping_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrapping_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wrapping_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// a ~ b: both printed and joined.
Value concat(const Value& l, const Value& r) {
  std::string joined = l.to_output() + r.to_output();
  if (joined.size() > kMaxValueSize) throw Error("value grows too large");
  return Value(std::move(joined));
}

// str + str and list + list; nullopt for other operand types.
std::optional<Value> add_sequences(const Value& l, const Value& r) {
  if ((l.is_string() && r.is_string() && l.as_string().size() + r.as_string().size() > kMaxValueSize) ||
      (l.is_list() && r.is_list() && l.as_list().size() + r.as_list().size() > kMaxValueSize)) {
    throw Error("value grows too large");
  }
  if (l.is_string() && r.is_string()) return Value(l.as_string() + r.as_string());
  if (l.is_list() && r.is_list()) {
    ValueList out = l.as_list();
    out.insert(out.end(), r.as_list().begin(), r.as_list().end());
    return Value(std::move(out));
  }
  return std::nullopt;
}

// str * int or int * str.
Value repeat_string(const Value& l, const Value& r) {
  const std::string& s = l.is_string() ? l.as_string() : r.as_string();
  const int64_t n = l.is_int() ? l.as_int() : r.as_int();
  if (n > (1 << 24) || (n > 0 && s.size() * static_cast<size_t>(n) > (1u << 24)))
    throw Error("string repetition too large");
  std::string out;
  for (int64_t i = 0; i < n; ++i) out += s;
  return Value(std::move(out));
}

// Integer operands (bools count as 0 and 1); nullopt for an operator integers leave to floats.
std::optional<Value> integer_arithmetic(const std::string& op, int64_t a, int64_t b) {
  if (op == "+") return Value(wrapping_add(a, b));
  if (op == "-") return Value(wrapping_sub(a, b));
  if (op == "*") return Value(wrapping_mul(a, b));
  if (b == 0 && (op == "//" || op == "%")) throw Error("division by zero");
  if (op == "//") return Value(b == -1 ? wrapping_sub(0, a) : floor_div(a, b));
  if (op == "%") return Value(b == -1 ? int64_t{0} : wrapping_sub(a, wrapping_mul(floor_div(a, b), b)));
  if (op == "**") {
    if (b < 0) return Value(std::pow(static_cast<double>(a), static_cast<double>(b)));
    int64_t result = 1;
    for (int64_t i = 0; i < b && i < 64; ++i) result = wrapping_mul(result, a);
    return Value(result);
  }
  return std::nullopt;
}

Value float_arithmetic(const std::string& op, double a, double b) {
  if (op == "+") return Value(a + b);
  if (op == "-") return Value(a - b);
  if (op == "*") return Value(a * b);
  if (op == "**") return Value(std::pow(a, b));
  if (b == 0) throw Error("division by zero");
  if (op == "//") return Value(std::floor(a / b));
  return Value(a - std::floor(a / b) * b);
}

Value binary_operation(const std::string& op, const Value& l, const Value& r) {
  if (op == "~") return concat(l, r);
  if (l.is_undefined()) require_defined(l);
  if (r.is_undefined()) require_defined(r);
  if (op == "+") {
    if (auto sum = add_sequences(l, r)) return *sum;
  }
  if (op == "*" && ((l.is_string() && r.is_int()) || (l.is_int() && r.is_string()))) return repeat_string(l, r);
  const bool numbers = (l.is_number() || l.is_bool()) && (r.is_number() || r.is_bool());
  if (!numbers) throw Error("unsupported operand types for " + op + ": " + l.type_name() + " and " + r.type_name());
  if (op == "/") {
    if (r.as_number() == 0) throw Error("division by zero");
    return Value(l.as_number() / r.as_number());
  }
  if (!l.is_float() && !r.is_float()) {
    auto ival = [](const Value& v) { return v.is_bool() ? static_cast<int64_t>(v.as_bool()) : v.as_int(); };
    if (auto result = integer_arithmetic(op, ival(l), ival(r))) return *result;
  }
  return float_arithmetic(op, l.as_number(), r.as_number());
}

bool compare(const std::string& op, const Value& left, const Value& right) {
  if (op == "==") return left.equals(right);
  if (op == "!=") return !left.equals(right);
  if (op == "<") return left.less_than(right);
  if (op == ">") return right.less_than(left);
  if (op == "<=") return !right.less_than(left);
  if (op == ">=") return !left.less_than(right);
  if (op == "in") return contains(right, left);
  return !contains(right, left);  // not in
}

}  // namespace

Value Not::eval(Context& ctx) const { return Value(!operand->eval(ctx).truthy()); }

Value Negate::eval(Context& ctx) const {
  const Value v = operand->eval(ctx);
  if (v.is_int()) return minus ? Value(wrapping_sub(0, v.as_int())) : v;
  if (v.is_float()) return minus ? Value(-v.as_number()) : v;
  throw Error("bad operand type for unary " + std::string(minus ? "-" : "+") + ": " + v.type_name());
}

Value Logical::eval(Context& ctx) const {
  Value l = left->eval(ctx);
  if (is_and ? !l.truthy() : l.truthy()) return l;
  return right->eval(ctx);
}

Value Binary::eval(Context& ctx) const {
  const Value l = left->eval(ctx), r = right->eval(ctx);
  Value result = binary_operation(op, l, r);
  ctx.charge(result);
  return result;
}

Value Compare::eval(Context& ctx) const {
  Value left = first->eval(ctx);
  for (const auto& [op, e] : rest) {
    Value right = e->eval(ctx);
    if (!compare(op, left, right)) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace nanovllm::jinja
