// Execution of statements: text, {{ output }}, if, for (with Jinja's loop variable), set, macro.
#include <string>
#include <unordered_map>

#include "jinja/ast.h"
#include "jinja/context.h"
#include "jinja/line_error.h"

namespace nanovllm::jinja {
namespace {

// Runs statements in order; an error inside one becomes an InvalidInput naming its line.
Flow exec_body(const std::vector<NodePtr>& body, Context& ctx, std::string& out) {
  for (const NodePtr& n : body) {
    if (++ctx.steps > kMaxSteps || out.size() > kMaxOutputBytes)
      fail_at_line(n->line, "rendering exceeds its step or output budget");
    try {
      const Flow f = n->exec(ctx, out);
      if (f != Flow::kNormal) return f;
    } catch (const Error& e) {
      fail_at_line(n->line, e.what());
    }
  }
  return Flow::kNormal;
}

// `for a, b in pairs` unpacks each item into the targets.
void bind_targets(const std::vector<std::string>& targets, Context& ctx, const Value& item) {
  if (targets.size() == 1) {
    ctx.assign(targets[0], item);
    return;
  }
  if (!item.is_list() || item.as_list().size() != targets.size()) {
    throw Error("cannot unpack a " + item.type_name() + " into " + std::to_string(targets.size()) + " loop variables");
  }
  for (size_t i = 0; i < targets.size(); ++i) ctx.assign(targets[i], item.as_list()[i]);
}

// Jinja's `loop` inside iteration i of items.
Value loop_variable(const ValueList& items, int64_t i) {
  const auto n = static_cast<int64_t>(items.size());
  ValueDict loop{{"index0", Value(i)},
                 {"index", Value(i + 1)},
                 {"revindex0", Value(n - i - 1)},
                 {"revindex", Value(n - i)},
                 {"first", Value(i == 0)},
                 {"last", Value(i == n - 1)},
                 {"length", Value(n)},
                 {"previtem", i > 0 ? items[i - 1] : Value::undefined("previtem")},
                 {"nextitem", i + 1 < n ? items[i + 1] : Value::undefined("nextitem")}};
  loop.emplace_back("cycle", Value(Function([i](const CallArgs& a) -> Value {
                      if (a.positional.empty()) throw Error("loop.cycle needs at least one argument");
                      return a.positional[static_cast<size_t>(i) % a.positional.size()];
                    })));
  return Value(std::move(loop));
}

// Functions count too: a bound method may hold a dict that holds the namespace.
bool holds_namespace(const Value& v) {
  if (v.is_namespace() || v.is_callable()) return true;
  if (v.is_list()) {
    for (const Value& item : v.as_list()) {
      if (holds_namespace(item)) return true;
    }
  }
  if (v.is_dict()) {
    for (const auto& [k, item] : v.as_dict()) {
      if (holds_namespace(item)) return true;
    }
  }
  return false;
}

// {% set ns.attribute = v %}
void set_namespace_attribute(Context& ctx, const std::string& name, const std::string& attribute, Value v) {
  // A namespace inside a namespace could form a reference cycle; real templates never need it.
  if (holds_namespace(v)) throw Error("cannot store a namespace or function inside namespace '" + name + "'");
  const Value target = ctx.lookup(name);
  if (!target.is_namespace())
    throw Error("cannot assign attribute '" + attribute + "' on a " + target.type_name() + " (only on a namespace)");
  for (auto& [k, existing] : target.as_namespace().attributes) {
    if (k == attribute) {
      existing = std::move(v);
      return;
    }
  }
  target.as_namespace().attributes.emplace_back(attribute, std::move(v));
}

// A macro call: binds the arguments in a new scope and returns what the body printed.
Value call_macro(const MacroNode& macro, Context& ctx, const CallArgs& args) {
  if (ctx.depth > 64) throw Error("macro '" + macro.name + "' recursed too deeply");
  std::unordered_map<std::string, Value> frame;
  if (args.positional.size() > macro.params.size()) throw Error("macro '" + macro.name + "' got too many arguments");
  for (size_t i = 0; i < macro.params.size(); ++i) {
    const auto& [pname, def] = macro.params[i];
    if (const Value* v = args.get(i, pname)) {
      frame[pname] = *v;
    } else {
      frame[pname] = def ? def->eval(ctx) : Value::undefined(pname);
    }
  }
  ctx.scopes.push_back(std::move(frame));
  ++ctx.depth;
  std::string out;
  try {
    exec_body(macro.body, ctx, out);
  } catch (...) {
    --ctx.depth;
    ctx.scopes.pop_back();
    throw;
  }
  --ctx.depth;
  ctx.scopes.pop_back();
  return Value(std::move(out));
}

}  // namespace

Flow TextNode::exec(Context&, std::string& out) const {
  out += text;
  return Flow::kNormal;
}

Flow OutputNode::exec(Context& ctx, std::string& out) const {
  out += expr->eval(ctx).to_output();
  return Flow::kNormal;
}

Flow IfNode::exec(Context& ctx, std::string& out) const {
  for (const auto& [cond, body] : branches) {
    if (cond->eval(ctx).truthy()) return exec_body(body, ctx, out);
  }
  return exec_body(otherwise, ctx, out);
}

Flow ForNode::exec(Context& ctx, std::string& out) const {
  ValueList items = iterable->eval(ctx).iterate();
  ctx.scopes.emplace_back();
  if (filter) {
    ValueList kept;
    for (const Value& item : items) {
      bind_targets(targets, ctx, item);
      if (filter->eval(ctx).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    if (++ctx.steps > kMaxSteps) throw Error("rendering exceeds its step budget");
    bind_targets(targets, ctx, items[i]);
    ctx.assign("loop", loop_variable(items, i));
    if (exec_body(body, ctx, out) == Flow::kBreak) break;
  }
  ctx.scopes.pop_back();
  if (n == 0) return exec_body(otherwise, ctx, out);
  return Flow::kNormal;
}

Flow SetNode::exec(Context& ctx, std::string&) const {
  Value v;
  if (is_block) {
    std::string captured;
    exec_body(block, ctx, captured);
    v = Value(std::move(captured));
  } else {
    v = value->eval(ctx);
  }
  if (!attribute.empty()) {
    set_namespace_attribute(ctx, name, attribute, std::move(v));
  } else if (!names.empty()) {
    if (!v.is_list() || v.as_list().size() != names.size())
      throw Error("cannot unpack a " + v.type_name() + " into " + std::to_string(names.size()) + " names");
    for (size_t i = 0; i < names.size(); ++i) ctx.assign(names[i], v.as_list()[i]);
  } else {
    ctx.assign(name, std::move(v));
  }
  return Flow::kNormal;
}

Flow MacroNode::exec(Context& ctx, std::string&) const {
  Context* c = &ctx;
  const MacroNode* self = this;
  ctx.assign(name, Value(Function([c, self](const CallArgs& args) { return call_macro(*self, *c, args); })));
  return Flow::kNormal;
}

Flow BodyNode::exec(Context& ctx, std::string& out) const { return exec_body(body, ctx, out); }

}  // namespace nanovllm::jinja
