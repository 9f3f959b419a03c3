#pragma once
// The syntax tree: expressions evaluate to a Value, statements append to the output. The parser builds it;
// expressions.cpp, operators.cpp and statements.cpp evaluate it.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace nanovllm::jinja {

struct Context;
enum class Flow { kNormal, kBreak, kContinue };

struct Expr {
  int line = 0;
  virtual ~Expr() = default;
  virtual Value eval(Context& ctx) const = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Node {
  int line = 0;
  virtual ~Node() = default;
  virtual Flow exec(Context& ctx, std::string& out) const = 0;
};
using NodePtr = std::unique_ptr<Node>;

// ------------------------------------------------------------------------------------------- expressions

struct Literal : Expr {
  Value value;
  Value eval(Context&) const override { return value; }
};

struct Name : Expr {
  std::string name;
  Value eval(Context& ctx) const override;
};

struct ListLiteral : Expr {  // tuples too
  std::vector<ExprPtr> items;
  Value eval(Context& ctx) const override;
};

struct DictLiteral : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  Value eval(Context& ctx) const override;
};

struct GetAttr : Expr {
  ExprPtr object;
  std::string name;
  Value eval(Context& ctx) const override;
};

struct GetItem : Expr {
  ExprPtr object, key;
  Value eval(Context& ctx) const override;
};

struct Slice : Expr {
  ExprPtr object, start, stop, step;  // each bound may be null
  Value eval(Context& ctx) const override;
};

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  CallArgs eval(Context& ctx) const;
};

struct Call : Expr {
  ExprPtr callee;
  Arguments args;
  Value eval(Context& ctx) const override;
};

struct FilterExpr : Expr {
  ExprPtr value;
  std::string name;
  Arguments args;
  Value eval(Context& ctx) const override;
};

struct TestExpr : Expr {  // value is [not] name(args)
  ExprPtr value;
  std::string name;
  Arguments args;
  bool negated = false;
  Value eval(Context& ctx) const override;
};

struct Not : Expr {
  ExprPtr operand;
  Value eval(Context& ctx) const override;
};

struct Negate : Expr {  // unary - and +
  ExprPtr operand;
  bool minus = true;
  Value eval(Context& ctx) const override;
};

struct Logical : Expr {  // and / or, short-circuiting and returning an operand as Python does
  ExprPtr left, right;
  bool is_and = true;
  Value eval(Context& ctx) const override;
};

struct Binary : Expr {  // + - * / // % ** ~
  ExprPtr left, right;
  std::string op;
  Value eval(Context& ctx) const override;
};

struct Compare : Expr {
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;  // chained like Python: a < b < c
  Value eval(Context& ctx) const override;
};

struct Conditional : Expr {
  ExprPtr then_value, condition, else_value;  // else may be null: undefined
  Value eval(Context& ctx) const override;
};

// -------------------------------------------------------------------------------------------- statements

struct TextNode : Node {
  std::string text;
  Flow exec(Context& ctx, std::string& out) const override;
};

struct OutputNode : Node {  // {{ expr }}
  ExprPtr expr;
  Flow exec(Context& ctx, std::string& out) const override;
};

struct IfNode : Node {
  std::vector<std::pair<ExprPtr, std::vector<NodePtr>>> branches;
  std::vector<NodePtr> otherwise;
  Flow exec(Context& ctx, std::string& out) const override;
};

struct ForNode : Node {
  std::vector<std::string> targets;
  ExprPtr iterable;
  ExprPtr filter;  // {% for x in xs if cond %}
  std::vector<NodePtr> body, otherwise;
  Flow exec(Context& ctx, std::string& out) const override;
};

struct SetNode : Node {
  std::string name;                // variable, or the namespace when attribute is set
  std::string attribute;           // ns.attribute = ...
  std::vector<std::string> names;  // a, b = ...
  ExprPtr value;
  std::vector<NodePtr> block;  // {% set x %}...{% endset %}
  bool is_block = false;
  Flow exec(Context& ctx, std::string& out) const override;
};

struct LoopControl : Node {  // break / continue
  Flow flow = Flow::kBreak;
  Flow exec(Context&, std::string&) const override { return flow; }
};

struct MacroNode : Node {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  std::vector<NodePtr> body;
  Flow exec(Context& ctx, std::string& out) const override;
};

struct BodyNode : Node {  // the template itself, and {% generation %}
  std::vector<NodePtr> body;
  Flow exec(Context& ctx, std::string& out) const override;
};

}  // namespace nanovllm::jinja
