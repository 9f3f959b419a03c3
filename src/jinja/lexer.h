#pragma once
// Splits a template into text and tag tokens, applying Jinja's whitespace rules as transformers sets them:
// trim_blocks (drop the newline after a block tag), lstrip_blocks (drop spaces before a block tag that starts
// its line), '-' and '+' modifiers, newline normalization and a dropped trailing newline.
#include <string>
#include <vector>

namespace nanovllm::jinja {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  Tok kind;
  std::string text;
  int line;
};

// The template's tokens, ending with one kEnd; malformed tags throw InvalidInput naming the line.
std::vector<Token> lex(std::string source);

}  // namespace nanovllm::jinja
