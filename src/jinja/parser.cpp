#include "jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string>

#include "jinja/filters.h"
#include "jinja/line_error.h"
#include "jinja/predicates.h"

namespace nanovllm::jinja {
namespace {

constexpr int kMaxStatementNesting = 256;
constexpr int kMaxExpressionNesting = 200;

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
  bool peek_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::kOp && peek(ahead).text == op;
  }
  bool peek_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::kName && peek(ahead).text == name;
  }
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
  [[noreturn]] void fail(const std::string& what) const { fail_at_line(peek().line, what); }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Tok::kEnd:
        return "end of template";
      case Tok::kVarEnd:
        return "'}}'";
      case Tok::kBlockEnd:
        return "'%}'";
      case Tok::kString:
        return "string '" + t.text + "'";
      default:
        return "'" + t.text + "'";
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

  // parse_body, then the '%}' that closes the end tag.
  std::vector<NodePtr> parse_block(const std::vector<std::string>& ends, std::string& end_tag) {
    std::vector<NodePtr> nodes = parse_body(ends, end_tag);
    expect_block_end();
    return nodes;
  }

  NodePtr parse_statement() {
    const int line = peek().line;
    const std::string tag = next().text;
    if (++statement_nesting_ > kMaxStatementNesting) fail_at_line(line, "blocks nested too deeply");
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
      if (loop_depth_ == 0) fail_at_line(line, "'" + tag + "' outside a for loop");
      auto n = std::make_unique<LoopControl>();
      n->flow = tag == "break" ? Flow::kBreak : Flow::kContinue;
      expect_block_end();
      node = std::move(n);
    } else if (tag == "generation") {  // transformers' assistant-mask marker: renders its body
      expect_block_end();
      auto n = std::make_unique<BodyNode>();
      std::string end;
      n->body = parse_block({"endgeneration"}, end);
      node = std::move(n);
    } else {
      fail_at_line(line, "unsupported tag '{% " + tag + " %}'");
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
        n->otherwise = parse_block({"endif"}, end);
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
    n->body = parse_block({"else", "endfor"}, end);
    --loop_depth_;
    if (end == "else") {
      n->otherwise = parse_block({"endfor"}, end);
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
      n->block = parse_block({"endset"}, end);
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
    n->body = parse_block({"endmacro"}, end);
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
    if (++nesting_ > kMaxExpressionNesting) fail("expression nested too deeply");
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
      if (++nesting_ > kMaxExpressionNesting) fail("expression nested too deeply");
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

  bool peek_any_op(std::initializer_list<const char*> ops) const {
    return std::any_of(ops.begin(), ops.end(), [&](const char* op) { return peek_op(op); });
  }

  // One precedence level of left-associative binary operators: operand (op operand)*.
  ExprPtr parse_binary_level(ExprPtr (Parser::*operand)(), std::initializer_list<const char*> ops) {
    ExprPtr left = (this->*operand)();
    while (peek_any_op(ops)) {
      const Token& op = next();
      left = binary(std::move(left), op.text, (this->*operand)(), op.line);
    }
    return left;
  }

  ExprPtr parse_math1() { return parse_binary_level(&Parser::parse_concat, {"+", "-"}); }
  ExprPtr parse_concat() { return parse_binary_level(&Parser::parse_math2, {"~"}); }
  ExprPtr parse_math2() { return parse_binary_level(&Parser::parse_pow, {"*", "/", "//", "%"}); }
  ExprPtr parse_pow() { return parse_binary_level(&Parser::parse_filtered_unary, {"**"}); }
  ExprPtr parse_filtered_unary() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (peek_op("-") || peek_op("+")) {
      const Token& op = next();
      if (++nesting_ > kMaxExpressionNesting) fail("expression nested too deeply");
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
        lit->value =
            tok.kind == Tok::kInt ? Value(static_cast<int64_t>(std::stoll(tok.text))) : Value(std::stod(tok.text));
      } catch (const std::exception&) {
        fail_at_line(line, "number '" + tok.text + "' is out of range");
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

  ExprPtr call(ExprPtr callee, int line) {  // after '('
    auto c = make<Call>(line);
    c->callee = std::move(callee);
    c->args = parse_arguments();
    return c;
  }

  ExprPtr item(ExprPtr object, ExprPtr key, int line) {
    auto i = make<GetItem>(line);
    i->object = std::move(object);
    i->key = std::move(key);
    return i;
  }

  // After '.': obj.name, or obj.0 meaning obj[0].
  ExprPtr parse_attribute(ExprPtr object, int line) {
    if (peek().kind == Tok::kInt) {
      const Token& index = next();
      if (index.text.size() > 18) fail_at_line(index.line, "index '" + index.text + "' is out of range");
      auto lit = make<Literal>(line);
      lit->value = Value(static_cast<int64_t>(std::stoll(index.text)));
      return item(std::move(object), std::move(lit), line);
    }
    auto g = make<GetAttr>(line);
    g->object = std::move(object);
    g->name = expect_name();
    return g;
  }

  // After '[': obj[key], or the slice obj[start:stop:step] with any part left out.
  ExprPtr parse_subscript(ExprPtr object, int line) {
    ExprPtr start, stop, step;
    bool is_slice = false;
    if (!peek_op(":")) start = parse_expression();
    if (accept_op(":")) {
      is_slice = true;
      if (!peek_op(":") && !peek_op("]")) stop = parse_expression();
      if (accept_op(":") && !peek_op("]")) step = parse_expression();
    }
    expect_op("]");
    if (!is_slice) {
      if (!start) fail("empty subscript");
      return item(std::move(object), std::move(start), line);
    }
    auto s = make<Slice>(line);
    s->object = std::move(object);
    s->start = std::move(start);
    s->stop = std::move(stop);
    s->step = std::move(step);
    return s;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const int line = peek().line;
      if (accept_op(".")) {
        node = parse_attribute(std::move(node), line);
      } else if (accept_op("[")) {
        node = parse_subscript(std::move(node), line);
      } else if (accept_op("(")) {
        node = call(std::move(node), line);
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
        if (!has_filter(f->name)) fail_at_line(line, "unsupported filter '" + f->name + "'");
        if (accept_op("(")) f->args = parse_arguments();
        node = std::move(f);
      } else if (accept_name("is")) {
        auto t = make<TestExpr>(line);
        t->value = std::move(node);
        t->negated = accept_name("not");
        t->name = expect_name();
        if (!has_test(t->name)) fail_at_line(line, "unsupported test '" + t->name + "'");
        if (accept_op("(")) {
          t->args = parse_arguments();
        } else if (peek().kind == Tok::kString || peek().kind == Tok::kInt || peek().kind == Tok::kFloat ||
                   (peek().kind == Tok::kName && !peek_name("else") && !peek_name("or") && !peek_name("and") &&
                    !peek_name("if") && !peek_name("is") && !peek_name("in") && !peek_name("not"))) {
          t->args.positional.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`
        }
        node = std::move(t);
      } else if (accept_op("(")) {
        node = call(std::move(node), line);
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

std::unique_ptr<Node> parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_template(); }

}  // namespace nanovllm::jinja
