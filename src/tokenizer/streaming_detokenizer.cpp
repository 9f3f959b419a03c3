#include "tokenizer/streaming_detokenizer.h"

#include "tokenizer/utf8.h"

namespace nanovllm {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> /*prompt_ids*/,
                                           bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDetokenizer::push(int32_t id) {
  const std::string_view bytes = tokenizer_.token_bytes(id);  // validates the id
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return {};
  pending_.append(bytes);
  // Invalid bytes are decided as soon as they are seen, so lossy decoding of the stable prefix is final.
  const size_t stable = utf8::stable_prefix_length(pending_);
  if (stable == 0) return {};
  std::string out = utf8::to_valid_lossy(std::string_view(pending_).substr(0, stable));
  pending_.erase(0, stable);
  text_ += out;
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out = utf8::to_valid_lossy(pending_);
  pending_.clear();
  text_ += out;
  return out;
}

}  // namespace nanovllm
