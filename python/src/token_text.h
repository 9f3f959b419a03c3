#pragma once
// A token's text as the logprobs of an output name it.
#include <cstdint>
#include <optional>
#include <string>

#include "engine/llm_engine.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm::python {

// nullopt without a tokenizer; "" for an id past the tokenizer's vocabulary (models pad theirs, and the engine's
// own outputs give such ids no text either).
inline std::optional<std::string> token_text(const LLMEngine& engine, int32_t token) {
  const Tokenizer* t = engine.tokenizer();
  if (t == nullptr) return std::nullopt;
  if (token < 0 || token >= t->vocab_size()) return std::string();
  const int32_t ids[] = {token};
  return t->decode(ids, false);
}

}  // namespace nanovllm::python
