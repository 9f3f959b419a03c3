#include "jinja/template.h"

#include "common/error.h"
#include "jinja/ast.h"
#include "jinja/context.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "tokenizer/utf8.h"

namespace nanovllm::jinja {

Template::Template(std::string source) {
  if (const size_t bad = utf8::find_invalid(source); bad != utf8::kAllValid) {
    throw InvalidInput("chat template is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  }
  root_ = parse(lex(std::move(source)));
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
