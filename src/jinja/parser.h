#pragma once
// Builds the syntax tree from tokens. Syntax errors and constructs outside the supported subset (raw, include,
// recursive loops, *args...) throw InvalidInput naming the construct and its line.
#include <memory>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace nanovllm::jinja {

std::unique_ptr<Node> parse(std::vector<Token> tokens);

}  // namespace nanovllm::jinja
