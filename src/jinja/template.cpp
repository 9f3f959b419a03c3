// Lexer, parser and evaluator of the Jinja subset. The lexer applies Jinja's whitespace rules as transformers
// sets them: trim_blocks (drop the newline after a block tag), lstrip_blocks (drop spaces before a block tag
// that starts its line), '-' and '+' modifiers, newline normalization and a dropped trailing newline.
#include "jinja/template.h"

#include <cstring>
#include <optional>
#include <vector>

#include "common/error.h"
#include "jinja/builtins.h"
#include "tokenizer/utf8.h"

namespace nanovllm::jinja {
namespace {

// ---------------------------------------------------------------- lexer

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  Tok kind;
  std::string text;
  int line;
};

[[noreturn]] void syntax_error(int line, const std::string& what) {
  throw InvalidInput("chat template line " + std::to_string(line) + ": " + what);
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(normalize(std::move(source))) {}

  std::vector<Token> run() {
    size_t text_begin = 0;
    bool strip_next_text = false;
    while (pos_ < src_.size()) {
      const size_t open = find_tag(pos_);
      if (open == std::string::npos) break;
      const char kind = src_[open + 1];
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      std::string text = src_.substr(text_begin, open - text_begin);
      const bool text_starts_line = text_begin == 0 || src_[text_begin - 1] == '\n';
      if (strip_next_text) text = lstrip_all(text);
      if (modifier == '-') {
        text = rstrip_all(text);
      } else if (modifier != '+' && kind != '{') {
        text = lstrip_block(text, text_starts_line);
      }
      emit_text(std::move(text));
      line_ = line_at(open);
      pos_ = open + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      bool right_strip = false, right_keep = false;
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) syntax_error(line_, "unclosed comment");
        right_strip = close > pos_ && src_[close - 1] == '-';
        right_keep = close > pos_ && src_[close - 1] == '+';
        pos_ = close + 2;
      } else {
        tokens_.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", line_});
        lex_expression(kind == '{' ? '}' : '%', right_strip, right_keep);
        tokens_.push_back({kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, "", line_});
      }
      if (kind != '{' && !right_strip && !right_keep && pos_ < src_.size() && src_[pos_] == '\n') ++pos_;  // trim_blocks
      strip_next_text = right_strip;
      text_begin = pos_;
    }
    std::string tail = src_.substr(text_begin);
    if (strip_next_text) tail = lstrip_all(tail);
    emit_text(std::move(tail));
    tokens_.push_back({Tok::kEnd, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  static std::string normalize(std::string s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\r') {
        out += '\n';
        if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      } else {
        out += s[i];
      }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline = False
    return out;
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  int line_at(size_t offset) {
    while (counted_ < offset && counted_ < src_.size()) {
      if (src_[counted_] == '\n') ++counted_line_;
      ++counted_;
    }
    return counted_line_;
  }

  static std::string lstrip_all(const std::string& s) {
    size_t i = 0;
    while (i < s.size() && is_blank(s[i])) ++i;
    return s.substr(i);
  }
  static std::string rstrip_all(const std::string& s) {
    size_t n = s.size();
    while (n > 0 && is_blank(s[n - 1])) --n;
    return s.substr(0, n);
  }
  // lstrip_blocks: spaces and tabs between the start of the line and a block tag go.
  static std::string lstrip_block(const std::string& s, bool starts_line) {
    const size_t nl = s.rfind('\n');
    const size_t line_begin = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !starts_line) return s;
    for (size_t i = line_begin; i < s.size(); ++i) {
      if (s[i] != ' ' && s[i] != '\t') return s;
    }
    return s.substr(0, line_begin);
  }

  void emit_text(std::string text) {
    if (!text.empty()) tokens_.push_back({Tok::kText, std::move(text), line_});
  }

  void lex_expression(char closer, bool& right_strip, bool& right_keep) {
    int depth = 0;  // open brackets: "}}" inside {'a': {'b': 1}} does not end the tag
    while (true) {
      while (pos_ < src_.size() && is_blank(src_[pos_])) ++pos_;
      line_ = line_at(pos_);
      if (pos_ >= src_.size()) syntax_error(line_, std::string("unclosed tag, expected '") + closer + "}'");
      const char c = src_[pos_];
      auto at = [&](const char* s) { return src_.compare(pos_, std::strlen(s), s) == 0; };
      if (depth == 0 && (c == '-' || c == '+') && pos_ + 2 < src_.size() && src_[pos_ + 1] == closer && src_[pos_ + 2] == '}') {
        right_strip = c == '-';
        right_keep = c == '+';
        pos_ += 3;
        return;
      }
      if (depth == 0 && c == closer && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}') {
        pos_ += 2;
        return;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        tokens_.push_back({Tok::kName, src_.substr(pos_, e - pos_), line_});
        pos_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = pos_;
        while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        bool is_float = false;
        if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
          is_float = true;
          ++e;
          while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
        }
        if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
          size_t x = e + 1;
          if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
          if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
            is_float = true;
            e = x;
            while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
          }
        }
        std::string digits;
        for (size_t i = pos_; i < e; ++i) {
          if (src_[i] != '_') digits += src_[i];
        }
        tokens_.push_back({is_float ? Tok::kFloat : Tok::kInt, digits, line_});
        pos_ = e;
      } else if (c == '\'' || c == '"') {
        tokens_.push_back({Tok::kString, lex_string(c), line_});
      } else if (at("//") || at("**") || at("==") || at("!=") || at("<=") || at(">=")) {
        tokens_.push_back({Tok::kOp, src_.substr(pos_, 2), line_});
        pos_ += 2;
      } else if (std::strchr("+-*/%~<>=()[]{},.:|", c)) {
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        tokens_.push_back({Tok::kOp, std::string(1, c), line_});
        ++pos_;
      } else {
        syntax_error(line_, std::string("unexpected character '") + c + "'");
      }
    }
  }

  std::string lex_string(char quote) {
    std::string out;
    size_t i = pos_ + 1;
    while (true) {
      if (i >= src_.size()) syntax_error(line_, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) syntax_error(line_, "unterminated string literal");
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + width > src_.size()) syntax_error(line_, "bad escape in string literal");
          char32_t cp = 0;
          for (size_t k = 0; k < width; ++k) {
            const char h = src_[i + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) syntax_error(line_, "bad escape in string literal");
            cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) syntax_error(line_, "bad escape in string literal");
          utf8::append(out, cp);
          i += width;
          break;
        }
        default:  // Python keeps unknown escapes as written
          out += '\\';
          out += e;
      }
    }
    pos_ = i + 1;
    return out;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t counted_ = 0;
  int counted_line_ = 1;
  std::vector<Token> tokens_;
};

// ---------------------------------------------------------------- AST

struct Context;
enum class Flow { kNormal, kBreak, kContinue };

struct Expr {
  int line = 0;
  virtual ~Expr() = default;
  virtual Value eval(Context& ctx) const = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

}  // namespace

struct Node {
  int line = 0;
  virtual ~Node() = default;
  virtual Flow exec(Context& ctx, std::string& out) const = 0;
};

namespace {

using NodePtr = std::unique_ptr<Node>;

// Limits that keep a hostile template from running forever or exhausting memory.
constexpr uint64_t kMaxSteps = 20'000'000;
constexpr size_t kMaxOutputBytes = 64u << 20;
constexpr size_t kMaxValueSize = 16u << 20;
constexpr int kMaxStatementNesting = 256;
constexpr uint64_t kMaxProducedBytes = 1ull << 28;

struct Context {
  std::vector<std::unordered_map<std::string, Value>> scopes;
  int depth = 0;  // macro recursion guard
  uint64_t steps = 0;
  uint64_t bytes = 0;  // produced by operators, filters and calls

  // Counts what a value costs to build; throws past the budget.
  const Value& charge(const Value& v) {
    bytes += v.is_string() ? v.as_string().size() : v.is_list() ? v.as_list().size() * 16 : v.is_dict() ? v.as_dict().size() * 32 : 1;
    if (bytes > kMaxProducedBytes) throw Error("rendering exceeds its memory budget");
    return v;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      if (const auto f = it->find(name); f != it->end()) return f->second;
    }
    if (auto g = global_function(name)) return *g;
    return Value::undefined(name);
  }
  void assign(const std::string& name, Value v) { scopes.back()[name] = std::move(v); }
};

Flow exec_body(const std::vector<NodePtr>& body, Context& ctx, std::string& out) {
  for (const NodePtr& n : body) {
    if (++ctx.steps > kMaxSteps || out.size() > kMaxOutputBytes) {
      throw InvalidInput("chat template line " + std::to_string(n->line) + ": rendering exceeds its step or output budget");
    }
    try {
      const Flow f = n->exec(ctx, out);
      if (f != Flow::kNormal) return f;
    } catch (const Error& e) {
      throw InvalidInput("chat template line " + std::to_string(n->line) + ": " + e.what());
    }
  }
  return Flow::kNormal;
}

// Expressions

struct Literal : Expr {
  Value value;
  Value eval(Context&) const override { return value; }
};

struct Name : Expr {
  std::string name;
  Value eval(Context& ctx) const override { return ctx.lookup(name); }
};

struct ListLiteral : Expr {
  std::vector<ExprPtr> items;
  Value eval(Context& ctx) const override {
    ValueList l;
    for (const auto& e : items) l.push_back(e->eval(ctx));
    return Value(std::move(l));
  }
};

struct DictLiteral : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  Value eval(Context& ctx) const override {
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
};

void require_defined(const Value& v) {
  if (v.is_undefined()) throw Error("'" + v.undefined_name() + "' is undefined");
}

struct GetAttr : Expr {
  ExprPtr object;
  std::string name;
  Value eval(Context& ctx) const override {
    const Value obj = object->eval(ctx);
    require_defined(obj);
    Value v = get_attribute(obj, name);
    if (v.is_undefined()) return Value::undefined(name);
    return v;
  }
};

struct GetItem : Expr {
  ExprPtr object, key;
  Value eval(Context& ctx) const override {
    const Value obj = object->eval(ctx);
    require_defined(obj);
    return get_item(obj, key->eval(ctx));
  }
};

struct Slice : Expr {
  ExprPtr object, start, stop, step;
  Value eval(Context& ctx) const override {
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
};

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  CallArgs eval(Context& ctx) const {
    CallArgs a;
    for (const auto& e : positional) a.positional.push_back(e->eval(ctx));
    for (const auto& [k, e] : keyword) a.keyword.emplace_back(k, e->eval(ctx));
    return a;
  }
};

struct Call : Expr {
  ExprPtr callee;
  Arguments args;
  Value eval(Context& ctx) const override {
    const Value f = callee->eval(ctx);
    if (f.is_undefined()) throw Error("'" + f.undefined_name() + "' is undefined and cannot be called");
    if (!f.is_callable()) throw Error("a " + f.type_name() + " is not callable");
    Value result = f.as_function()(args.eval(ctx));
    ctx.charge(result);
    return result;
  }
};

struct FilterExpr : Expr {
  ExprPtr value;
  std::string name;
  Arguments args;
  Value eval(Context& ctx) const override {
    Value result = apply_filter(name, value->eval(ctx), args.eval(ctx));
    ctx.charge(result);
    return result;
  }
};

struct TestExpr : Expr {
  ExprPtr value;
  std::string name;
  Arguments args;
  bool negated = false;
  Value eval(Context& ctx) const override { return Value(apply_test(name, value->eval(ctx), args.eval(ctx)) != negated); }
};

struct Not : Expr {
  ExprPtr operand;
  Value eval(Context& ctx) const override { return Value(!operand->eval(ctx).truthy()); }
};

struct Negate : Expr {
  ExprPtr operand;
  bool minus = true;
  Value eval(Context& ctx) const override {
    const Value v = operand->eval(ctx);
    if (v.is_int()) return minus ? Value(static_cast<int64_t>(0 - static_cast<uint64_t>(v.as_int()))) : v;
    if (v.is_float()) return minus ? Value(-v.as_number()) : v;
    throw Error("bad operand type for unary " + std::string(minus ? "-" : "+") + ": " + v.type_name());
  }
};

struct Logical : Expr {
  ExprPtr left, right;
  bool is_and = true;
  Value eval(Context& ctx) const override {
    Value l = left->eval(ctx);
    if (is_and ? !l.truthy() : l.truthy()) return l;
    return right->eval(ctx);
  }
};

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

struct Binary : Expr {
  ExprPtr left, right;
  std::string op;
  Value eval(Context& ctx) const override {
    Value result = compute(ctx);
    ctx.charge(result);
    return result;
  }
  Value compute(Context& ctx) const {
    const Value l = left->eval(ctx), r = right->eval(ctx);
    if (op == "~") {
      std::string joined = l.to_output() + r.to_output();
      if (joined.size() > kMaxValueSize) throw Error("value grows too large");
      return Value(std::move(joined));
    }
    if (l.is_undefined()) require_defined(l);
    if (r.is_undefined()) require_defined(r);
    if (op == "+") {
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
    }
    if (op == "*" && ((l.is_string() && r.is_int()) || (l.is_int() && r.is_string()))) {
      const std::string& s = l.is_string() ? l.as_string() : r.as_string();
      const int64_t n = l.is_int() ? l.as_int() : r.as_int();
      if (n > (1 << 24) || (n > 0 && s.size() * static_cast<size_t>(n) > (1u << 24))) throw Error("string repetition too large");
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += s;
      return Value(std::move(out));
    }
    const bool numbers = (l.is_number() || l.is_bool()) && (r.is_number() || r.is_bool());
    if (!numbers) throw Error("unsupported operand types for " + op + ": " + l.type_name() + " and " + r.type_name());
    const bool ints = !l.is_float() && !r.is_float();
    auto ival = [](const Value& v) { return v.is_bool() ? static_cast<int64_t>(v.as_bool()) : v.as_int(); };
    if (op == "/") {
      if (r.as_number() == 0) throw Error("division by zero");
      return Value(l.as_number() / r.as_number());
    }
    if (ints) {
      const int64_t a = ival(l), b = ival(r);
      if (op == "+") return Value(static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)));
      if (op == "-") return Value(static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)));
      if (op == "*") return Value(static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)));
      if (b == 0 && (op == "//" || op == "%")) throw Error("division by zero");
      if (op == "//") return Value(b == -1 ? static_cast<int64_t>(0 - static_cast<uint64_t>(a)) : floor_div(a, b));
      if (op == "%") {
        if (b == -1) return Value(int64_t{0});
        const uint64_t product = static_cast<uint64_t>(floor_div(a, b)) * static_cast<uint64_t>(b);
        return Value(static_cast<int64_t>(static_cast<uint64_t>(a) - product));
      }
      if (op == "**") {
        if (b < 0) return Value(std::pow(static_cast<double>(a), static_cast<double>(b)));
        int64_t result = 1;
        for (int64_t i = 0; i < b && i < 64; ++i) result = static_cast<int64_t>(static_cast<uint64_t>(result) * static_cast<uint64_t>(a));
        return Value(result);
      }
    }
    const double a = l.as_number(), b = r.as_number();
    if (op == "+") return Value(a + b);
    if (op == "-") return Value(a - b);
    if (op == "*") return Value(a * b);
    if (op == "**") return Value(std::pow(a, b));
    if (b == 0) throw Error("division by zero");
    if (op == "//") return Value(std::floor(a / b));
    return Value(a - std::floor(a / b) * b);
  }
};

struct Compare : Expr {
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;  // chained like Python: a < b < c
  Value eval(Context& ctx) const override {
    Value left = first->eval(ctx);
    for (const auto& [op, e] : rest) {
      Value right = e->eval(ctx);
      bool ok;
      if (op == "==") ok = left.equals(right);
      else if (op == "!=") ok = !left.equals(right);
      else if (op == "<") ok = left.less_than(right);
      else if (op == ">") ok = right.less_than(left);
      else if (op == "<=") ok = !right.less_than(left);
      else if (op == ">=") ok = !left.less_than(right);
      else if (op == "in") ok = contains(right, left);
      else ok = !contains(right, left);  // not in
      if (!ok) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }
};

struct Conditional : Expr {
  ExprPtr then_value, condition, else_value;  // else may be null: undefined
  Value eval(Context& ctx) const override {
    if (condition->eval(ctx).truthy()) return then_value->eval(ctx);
    return else_value ? else_value->eval(ctx) : Value();
  }
};

// Statements

struct TextNode : Node {
  std::string text;
  Flow exec(Context&, std::string& out) const override {
    out += text;
    return Flow::kNormal;
  }
};

struct OutputNode : Node {
  ExprPtr expr;
  Flow exec(Context& ctx, std::string& out) const override {
    out += expr->eval(ctx).to_output();
    return Flow::kNormal;
  }
};

struct IfNode : Node {
  std::vector<std::pair<ExprPtr, std::vector<NodePtr>>> branches;
  std::vector<NodePtr> otherwise;
  Flow exec(Context& ctx, std::string& out) const override {
    for (const auto& [cond, body] : branches) {
      if (cond->eval(ctx).truthy()) return exec_body(body, ctx, out);
    }
    return exec_body(otherwise, ctx, out);
  }
};

struct ForNode : Node {
  std::vector<std::string> targets;
  ExprPtr iterable;
  ExprPtr filter;  // {% for x in xs if cond %}
  std::vector<NodePtr> body, otherwise;

  void bind(Context& ctx, const Value& item) const {
    if (targets.size() == 1) {
      ctx.assign(targets[0], item);
      return;
    }
    if (!item.is_list() || item.as_list().size() != targets.size()) {
      throw Error("cannot unpack a " + item.type_name() + " into " + std::to_string(targets.size()) + " loop variables");
    }
    for (size_t i = 0; i < targets.size(); ++i) ctx.assign(targets[i], item.as_list()[i]);
  }

  Flow exec(Context& ctx, std::string& out) const override {
    const Value seq = iterable->eval(ctx);
    ValueList items = seq.is_dict() ? seq.iterate() : seq.iterate();
    ctx.scopes.emplace_back();
    if (filter) {
      ValueList kept;
      for (const Value& item : items) {
        bind(ctx, item);
        if (filter->eval(ctx).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      if (++ctx.steps > kMaxSteps) throw Error("rendering exceeds its step budget");
      bind(ctx, items[i]);
      ValueDict loop{{"index0", Value(i)},
                     {"index", Value(i + 1)},
                     {"revindex0", Value(n - i - 1)},
                     {"revindex", Value(n - i)},
                     {"first", Value(i == 0)},
                     {"last", Value(i == n - 1)},
                     {"length", Value(n)},
                     {"previtem", i > 0 ? items[i - 1] : Value::undefined("previtem")},
                     {"nextitem", i + 1 < n ? items[i + 1] : Value::undefined("nextitem")}};
      const int64_t index = i;
      loop.emplace_back("cycle", Value(Function([index](const CallArgs& a) -> Value {
        if (a.positional.empty()) throw Error("loop.cycle needs at least one argument");
        return a.positional[static_cast<size_t>(index) % a.positional.size()];
      })));
      ctx.assign("loop", Value(std::move(loop)));
      const Flow f = exec_body(body, ctx, out);
      if (f == Flow::kBreak) break;
    }
    ctx.scopes.pop_back();
    if (n == 0) return exec_body(otherwise, ctx, out);
    return Flow::kNormal;
  }
};

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

struct SetNode : Node {
  std::string name;       // variable, or the namespace when attribute is set
  std::string attribute;  // ns.attribute = ...
  std::vector<std::string> names;  // a, b = ...
  ExprPtr value;
  std::vector<NodePtr> block;  // {% set x %}...{% endset %}
  bool is_block = false;
  Flow exec(Context& ctx, std::string&) const override {
    Value v;
    if (is_block) {
      std::string captured;
      exec_body(block, ctx, captured);
      v = Value(std::move(captured));
    } else {
      v = value->eval(ctx);
    }
    if (!attribute.empty()) {
      // A namespace inside a namespace could form a reference cycle; real templates never need it.
      if (holds_namespace(v)) throw Error("cannot store a namespace or function inside namespace '" + name + "'");
      const Value target = ctx.lookup(name);
      if (!target.is_namespace()) throw Error("cannot assign attribute '" + attribute + "' on a " + target.type_name() + " (only on a namespace)");
      for (auto& [k, existing] : target.as_namespace().attributes) {
        if (k == attribute) {
          existing = std::move(v);
          return Flow::kNormal;
        }
      }
      target.as_namespace().attributes.emplace_back(attribute, std::move(v));
    } else if (!names.empty()) {
      if (!v.is_list() || v.as_list().size() != names.size()) throw Error("cannot unpack a " + v.type_name() + " into " + std::to_string(names.size()) + " names");
      for (size_t i = 0; i < names.size(); ++i) ctx.assign(names[i], v.as_list()[i]);
    } else {
      ctx.assign(name, std::move(v));
    }
    return Flow::kNormal;
  }
};

struct LoopControl : Node {
  Flow flow;
  Flow exec(Context&, std::string&) const override { return flow; }
};

struct MacroNode : Node {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  std::vector<NodePtr> body;
  Flow exec(Context& ctx, std::string&) const override {
    Context* c = &ctx;
    const MacroNode* self = this;
    ctx.assign(name, Value(Function([c, self](const CallArgs& args) -> Value {
      if (c->depth > 64) throw Error("macro '" + self->name + "' recursed too deeply");
      std::unordered_map<std::string, Value> frame;
      if (args.positional.size() > self->params.size()) throw Error("macro '" + self->name + "' got too many arguments");
      for (size_t i = 0; i < self->params.size(); ++i) {
        const auto& [pname, def] = self->params[i];
        if (const Value* v = args.get(i, pname)) {
          frame[pname] = *v;
        } else {
          frame[pname] = def ? def->eval(*c) : Value::undefined(pname);
        }
      }
      c->scopes.push_back(std::move(frame));
      ++c->depth;
      std::string out;
      try {
        exec_body(self->body, *c, out);
      } catch (...) {
        --c->depth;
        c->scopes.pop_back();
        throw;
      }
      --c->depth;
      c->scopes.pop_back();
      return Value(std::move(out));
    })));
    return Flow::kNormal;
  }
};

struct BodyNode : Node {
  std::vector<NodePtr> body;
  Flow exec(Context& ctx, std::string& out) const override { return exec_body(body, ctx, out); }
};

// ---------------------------------------------------------------- parser

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  std::unique_ptr<Node> parse_template() {
    auto root = std::make_unique<BodyNode>();
    std::string end_tag;
    root->body = parse_body({}, end_tag);
    return root;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(p_++, t_.size() - 1)]; }
  bool peek_op(const char* op, size_t ahead = 0) const { return peek(ahead).kind == Tok::kOp && peek(ahead).text == op; }
  bool peek_name(const char* name, size_t ahead = 0) const { return peek(ahead).kind == Tok::kName && peek(ahead).text == name; }
  bool accept_op(const char* op) {
    if (!peek_op(op)) return false;
    ++p_;
    return true;
  }
  bool accept_name(const char* name) {
    if (!peek_name(name)) return false;
    ++p_;
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const { syntax_error(peek().line, what); }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Tok::kEnd: return "end of template";
      case Tok::kVarEnd: return "'}}'";
      case Tok::kBlockEnd: return "'%}'";
      case Tok::kString: return "string '" + t.text + "'";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "', found " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().kind != Tok::kName) fail("expected a name, found " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != Tok::kBlockEnd) fail("expected '%}', found " + describe(peek()));
    ++p_;
  }

  // Parses nodes until a block tag whose name is in `ends`; leaves that tag's name in end_tag and the parser
  // after the tag name.
  std::vector<NodePtr> parse_body(const std::vector<std::string>& ends, std::string& end_tag) {
    std::vector<NodePtr> nodes;
    while (true) {
      const Token& tok = peek();
      if (tok.kind == Tok::kEnd) {
        if (!ends.empty()) fail("unexpected end of template, expected '{% " + ends.back() + " %}'");
        return nodes;
      }
      if (tok.kind == Tok::kText) {
        auto n = std::make_unique<TextNode>();
        n->line = tok.line;
        n->text = tok.text;
        nodes.push_back(std::move(n));
        ++p_;
      } else if (tok.kind == Tok::kVarBegin) {
        ++p_;
        auto n = std::make_unique<OutputNode>();
        n->line = tok.line;
        n->expr = parse_expression();
        if (peek().kind != Tok::kVarEnd) fail("expected '}}', found " + describe(peek()));
        ++p_;
        nodes.push_back(std::move(n));
      } else if (tok.kind == Tok::kBlockBegin) {
        ++p_;
        if (peek().kind != Tok::kName) fail("expected a tag name, found " + describe(peek()));
        const std::string name = peek().text;
        for (const std::string& e : ends) {
          if (name == e) {
            ++p_;
            end_tag = name;
            return nodes;
          }
        }
        nodes.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(tok));
      }
    }
  }

  NodePtr parse_statement() {
    const int line = peek().line;
    const std::string tag = next().text;
    if (++statement_nesting_ > kMaxStatementNesting) syntax_error(line, "blocks nested too deeply");
    struct Unnest {
      int& n;
      ~Unnest() { --n; }
    } unnest{statement_nesting_};
    NodePtr node;
    if (tag == "if") {
      node = parse_if();
    } else if (tag == "for") {
      node = parse_for();
    } else if (tag == "set") {
      node = parse_set();
    } else if (tag == "macro") {
      node = parse_macro();
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) syntax_error(line, "'" + tag + "' outside a for loop");
      auto n = std::make_unique<LoopControl>();
      n->flow = tag == "break" ? Flow::kBreak : Flow::kContinue;
      expect_block_end();
      node = std::move(n);
    } else if (tag == "generation") {  // transformers' assistant-mask marker: renders its body
      expect_block_end();
      auto n = std::make_unique<BodyNode>();
      std::string end;
      n->body = parse_body({"endgeneration"}, end);
      expect_block_end();
      node = std::move(n);
    } else {
      syntax_error(line, "unsupported tag '{% " + tag + " %}'");
    }
    node->line = line;
    return node;
  }

  NodePtr parse_if() {
    auto n = std::make_unique<IfNode>();
    ExprPtr cond = parse_expression();
    expect_block_end();
    while (true) {
      std::string end;
      auto body = parse_body({"elif", "else", "endif"}, end);
      n->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") {
        cond = parse_expression();
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (end == "else") {
        n->otherwise = parse_body({"endif"}, end);
        expect_block_end();
      }
      return n;
    }
  }

  NodePtr parse_for() {
    auto n = std::make_unique<ForNode>();
    n->targets.push_back(expect_name());
    while (accept_op(",")) n->targets.push_back(expect_name());
    if (!accept_name("in")) fail("expected 'in' in for loop, found " + describe(peek()));
    n->iterable = parse_or_ternary_free();
    if (accept_name("if")) n->filter = parse_or();
    if (peek_name("recursive")) fail("unsupported construct 'recursive' loop");
    expect_block_end();
    ++loop_depth_;
    std::string end;
    n->body = parse_body({"else", "endfor"}, end);
    --loop_depth_;
    expect_block_end();
    if (end == "else") {
      n->otherwise = parse_body({"endfor"}, end);
      expect_block_end();
    }
    return n;
  }

  NodePtr parse_set() {
    auto n = std::make_unique<SetNode>();
    n->name = expect_name();
    if (accept_op(".")) {
      n->attribute = expect_name();
    } else if (peek_op(",")) {
      n->names.push_back(n->name);
      while (accept_op(",")) n->names.push_back(expect_name());
    }
    if (accept_op("=")) {
      n->value = parse_tuple_or_expression();
      expect_block_end();
    } else {
      if (!n->attribute.empty() || !n->names.empty()) fail("expected '=' in set");
      expect_block_end();
      n->is_block = true;
      std::string end;
      n->block = parse_body({"endset"}, end);
      expect_block_end();
    }
    return n;
  }

  NodePtr parse_macro() {
    auto n = std::make_unique<MacroNode>();
    n->name = expect_name();
    expect_op("(");
    while (!accept_op(")")) {
      std::string param = expect_name();
      ExprPtr def;
      if (accept_op("=")) def = parse_expression();
      n->params.emplace_back(std::move(param), std::move(def));
      if (!peek_op(")")) expect_op(",");
    }
    expect_block_end();
    std::string end;
    n->body = parse_body({"endmacro"}, end);
    expect_block_end();
    return n;
  }

  template <typename T>
  std::unique_ptr<T> make(int line) {
    auto e = std::make_unique<T>();
    e->line = line;
    return e;
  }

  // a, b (a tuple without parentheses) or one expression.
  ExprPtr parse_tuple_or_expression() {
    const int line = peek().line;
    ExprPtr first = parse_expression();
    if (!peek_op(",")) return first;
    auto list = make<ListLiteral>(line);
    list->items.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek().kind == Tok::kBlockEnd) break;
      list->items.push_back(parse_expression());
    }
    return list;
  }

  ExprPtr parse_expression() {
    if (++nesting_ > 200) fail("expression nested too deeply");
    ExprPtr e = parse_conditional();
    --nesting_;
    return e;
  }

  ExprPtr parse_conditional() {
    const int line = peek().line;
    ExprPtr value = parse_or();
    while (accept_name("if")) {
      auto c = make<Conditional>(line);
      c->then_value = std::move(value);
      c->condition = parse_or();
      if (accept_name("else")) c->else_value = parse_conditional();
      value = std::move(c);
    }
    return value;
  }

  ExprPtr parse_or_ternary_free() { return parse_or(); }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (peek_name("or")) {
      const int line = next().line;
      auto e = make<Logical>(line);
      e->is_and = false;
      e->left = std::move(left);
      e->right = parse_and();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (peek_name("and")) {
      const int line = next().line;
      auto e = make<Logical>(line);
      e->left = std::move(left);
      e->right = parse_not();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (peek_name("not") && !peek_name("in", 1)) {
      const int line = next().line;
      if (++nesting_ > 200) fail("expression nested too deeply");
      auto e = make<Not>(line);
      e->operand = parse_not();
      --nesting_;
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    std::unique_ptr<Compare> cmp;
    while (true) {
      std::string op;
      if (peek().kind == Tok::kOp && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                      peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (accept_name("in")) {
        op = "in";
      } else if (peek_name("not") && peek_name("in", 1)) {
        p_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make<Compare>(line);
        cmp->first = std::move(first);
      }
      cmp->rest.emplace_back(op, parse_math1());
    }
    if (cmp) return cmp;
    return first;
  }

  ExprPtr binary(ExprPtr left, const std::string& op, ExprPtr right, int line) {
    auto e = make<Binary>(line);
    e->left = std::move(left);
    e->op = op;
    e->right = std::move(right);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (peek_op("+") || peek_op("-")) {
      const Token& op = next();
      left = binary(std::move(left), op.text, parse_concat(), op.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (peek_op("~")) {
      const Token& op = next();
      left = binary(std::move(left), "~", parse_math2(), op.line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (peek_op("*") || peek_op("/") || peek_op("//") || peek_op("%")) {
      const Token& op = next();
      left = binary(std::move(left), op.text, parse_pow(), op.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (peek_op("**")) {
      const Token& op = next();
      left = binary(std::move(left), "**", parse_unary(true), op.line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (peek_op("-") || peek_op("+")) {
      const Token& op = next();
      if (++nesting_ > 200) fail("expression nested too deeply");
      auto e = make<Negate>(op.line);
      e->minus = op.text == "-";
      e->operand = parse_unary(false);
      --nesting_;
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filters_and_tests(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tok = peek();
    const int line = tok.line;
    if (tok.kind == Tok::kName) {
      ++p_;
      auto lit = make<Literal>(line);
      if (tok.text == "true" || tok.text == "True") {
        lit->value = Value(true);
      } else if (tok.text == "false" || tok.text == "False") {
        lit->value = Value(false);
      } else if (tok.text == "none" || tok.text == "None") {
        lit->value = Value(None{});
      } else {
        auto n = make<Name>(line);
        n->name = tok.text;
        return n;
      }
      return lit;
    }
    if (tok.kind == Tok::kString) {
      std::string s;
      while (peek().kind == Tok::kString) s += next().text;  // adjacent literals concatenate
      auto lit = make<Literal>(line);
      lit->value = Value(std::move(s));
      return lit;
    }
    if (tok.kind == Tok::kInt || tok.kind == Tok::kFloat) {
      ++p_;
      auto lit = make<Literal>(line);
      try {
        lit->value = tok.kind == Tok::kInt ? Value(static_cast<int64_t>(std::stoll(tok.text))) : Value(std::stod(tok.text));
      } catch (const std::exception&) {
        syntax_error(line, "number '" + tok.text + "' is out of range");
      }
      return lit;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return make<ListLiteral>(line);
      ExprPtr first = parse_expression();
      if (accept_op(")")) return first;
      auto list = make<ListLiteral>(line);  // a tuple behaves as a list here
      list->items.push_back(std::move(first));
      while (accept_op(",")) {
        if (peek_op(")")) break;
        list->items.push_back(parse_expression());
      }
      expect_op(")");
      return list;
    }
    if (accept_op("[")) {
      auto list = make<ListLiteral>(line);
      while (!accept_op("]")) {
        list->items.push_back(parse_expression());
        if (!peek_op("]")) expect_op(",");
      }
      return list;
    }
    if (accept_op("{")) {
      auto dict = make<DictLiteral>(line);
      while (!accept_op("}")) {
        ExprPtr key = parse_expression();
        expect_op(":");
        dict->items.emplace_back(std::move(key), parse_expression());
        if (!peek_op("}")) expect_op(",");
      }
      return dict;
    }
    fail("unexpected " + describe(tok) + " in expression");
  }

  Arguments parse_arguments() {  // after '('
    Arguments args;
    while (!accept_op(")")) {
      if (peek().kind == Tok::kName && peek_op("=", 1)) {
        std::string name = next().text;
        ++p_;
        args.keyword.emplace_back(std::move(name), parse_expression());
      } else {
        if (peek_op("*")) fail("unsupported construct '*args' in a call");
        args.positional.push_back(parse_expression());
      }
      if (!peek_op(")")) expect_op(",");
    }
    return args;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const int line = peek().line;
      if (accept_op(".")) {
        auto g = make<GetAttr>(line);
        g->object = std::move(node);
        if (peek().kind == Tok::kInt) {
          auto item = make<GetItem>(line);
          item->object = std::move(g->object);
          auto lit = make<Literal>(line);
          const Token& index = next();
          if (index.text.size() > 18) syntax_error(index.line, "index '" + index.text + "' is out of range");
          lit->value = Value(static_cast<int64_t>(std::stoll(index.text)));
          item->key = std::move(lit);
          node = std::move(item);
          continue;
        }
        g->name = expect_name();
        node = std::move(g);
      } else if (accept_op("[")) {
        ExprPtr start, stop, step;
        bool is_slice = false;
        if (!peek_op(":")) start = parse_expression();
        if (accept_op(":")) {
          is_slice = true;
          if (!peek_op(":") && !peek_op("]")) stop = parse_expression();
          if (accept_op(":") && !peek_op("]")) step = parse_expression();
        }
        expect_op("]");
        if (is_slice) {
          auto s = make<Slice>(line);
          s->object = std::move(node);
          s->start = std::move(start);
          s->stop = std::move(stop);
          s->step = std::move(step);
          node = std::move(s);
        } else {
          if (!start) fail("empty subscript");
          auto item = make<GetItem>(line);
          item->object = std::move(node);
          item->key = std::move(start);
          node = std::move(item);
        }
      } else if (accept_op("(")) {
        auto c = make<Call>(line);
        c->callee = std::move(node);
        c->args = parse_arguments();
        node = std::move(c);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filters_and_tests(ExprPtr node) {
    while (true) {
      const int line = peek().line;
      if (accept_op("|")) {
        auto f = make<FilterExpr>(line);
        f->value = std::move(node);
        f->name = expect_name();
        if (!has_filter(f->name)) syntax_error(line, "unsupported filter '" + f->name + "'");
        if (accept_op("(")) f->args = parse_arguments();
        node = std::move(f);
      } else if (accept_name("is")) {
        auto t = make<TestExpr>(line);
        t->value = std::move(node);
        t->negated = accept_name("not");
        t->name = expect_name();
        if (!has_test(t->name)) syntax_error(line, "unsupported test '" + t->name + "'");
        if (accept_op("(")) {
          t->args = parse_arguments();
        } else if (peek().kind == Tok::kString || peek().kind == Tok::kInt || peek().kind == Tok::kFloat ||
                   (peek().kind == Tok::kName && !peek_name("else") && !peek_name("or") && !peek_name("and") &&
                    !peek_name("if") && !peek_name("is") && !peek_name("in") && !peek_name("not"))) {
          t->args.positional.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`
        }
        node = std::move(t);
      } else if (peek_op("(")) {
        ++p_;
        auto c = make<Call>(line);
        c->callee = std::move(node);
        c->args = parse_arguments();
        node = std::move(c);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
  int statement_nesting_ = 0;
};

}  // namespace

Template::Template(std::string source) {
  if (const size_t bad = utf8::find_invalid(source); bad != utf8::kAllValid) {
    throw InvalidInput("chat template is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  }
  Parser parser(Lexer(std::move(source)).run());
  root_ = parser.parse_template();
}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

std::string Template::render(const std::unordered_map<std::string, Value>& variables) const {
  Context ctx;
  ctx.scopes.push_back(variables);
  ctx.scopes.emplace_back();
  std::string out;
  root_->exec(ctx, out);
  return out;
}

}  // namespace nanovllm::jinja
