// Evaluation of names, literals, access, calls, filters, tests and conditionals. Operators are in operators.cpp.
#include <optional>

#include "jinja/access.h"
#include "jinja/ast.h"
#include "jinja/context.h"
#include "jinja/filters.h"
#include "jinja/predicates.h"

namespace nanovllm::jinja {

Value Name::eval(Context& ctx) const { return ctx.lookup(name); }

Value ListLiteral::eval(Context& ctx) const {
  ValueList l;
  for (const auto& e : items) l.push_back(e->eval(ctx));
  return Value(std::move(l));
}

Value DictLiteral::eval(Context& ctx) const {
  ValueDict d;
  for (const auto& [k, v] : items) {
    const Value key = k->eval(ctx);
    if (!key.is_string()) throw Error("dict keys must be strings, got a " + key.type_name());
    Value value = v->eval(ctx);
    bool replaced = false;
    for (auto& [dk, dv] : d) {
      if (dk == key.as_string()) {
        dv = value;
        replaced = true;
      }
    }
    if (!replaced) d.emplace_back(key.as_string(), std::move(value));
  }
  return Value(std::move(d));
}

Value GetAttr::eval(Context& ctx) const {
  const Value obj = object->eval(ctx);
  require_defined(obj);
  Value v = get_attribute(obj, name);
  if (v.is_undefined()) return Value::undefined(name);
  return v;
}

Value GetItem::eval(Context& ctx) const {
  const Value obj = object->eval(ctx);
  require_defined(obj);
  return get_item(obj, key->eval(ctx));
}

Value Slice::eval(Context& ctx) const {
  const Value obj = object->eval(ctx);
  require_defined(obj);
  auto bound = [&](const ExprPtr& e) -> std::optional<int64_t> {
    if (!e) return std::nullopt;
    const Value v = e->eval(ctx);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int()) throw Error("slice indices must be integers");
    return v.as_int();
  };
  return get_slice(obj, bound(start), bound(stop), bound(step));
}

CallArgs Arguments::eval(Context& ctx) const {
  CallArgs a;
  for (const auto& e : positional) a.positional.push_back(e->eval(ctx));
  for (const auto& [k, e] : keyword) a.keyword.emplace_back(k, e->eval(ctx));
  return a;
}

Value Call::eval(Context& ctx) const {
  const Value f = callee->eval(ctx);
  if (f.is_undefined()) throw Error("'" + f.undefined_name() + "' is undefined and cannot be called");
  if (!f.is_callable()) throw Error("a " + f.type_name() + " is not callable");
  Value result = f.as_function()(args.eval(ctx));
  ctx.charge(result);
  return result;
}

Value FilterExpr::eval(Context& ctx) const {
  Value result = apply_filter(name, value->eval(ctx), args.eval(ctx));
  ctx.charge(result);
  return result;
}

Value TestExpr::eval(Context& ctx) const {
  return Value(apply_test(name, value->eval(ctx), args.eval(ctx)) != negated);
}

Value Conditional::eval(Context& ctx) const {
  if (condition->eval(ctx).truthy()) return then_value->eval(ctx);
  return else_value ? else_value->eval(ctx) : Value();
}

}  // namespace nanovllm::jinja
