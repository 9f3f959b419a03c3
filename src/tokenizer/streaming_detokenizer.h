#pragma once
// Text that grows as tokens arrive. Byte-level BPE decodes token by token to bytes, so the stream holds back only
// an incomplete UTF-8 sequence at the end; everything else is final. push()es + flush() == decode(all ids).
#include <cstdint>
#include <span>
#include <string>

#include "tokenizer/tokenizer.h"

namespace nanovllm {

class StreamingDetokenizer {
 public:
  // prompt_ids give context (byte-level decoding needs none; kept so other decoders can use it).
  StreamingDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids, bool skip_special_tokens);

  // Newly stable text; never ends inside a UTF-8 character. Throws InvalidInput for an out-of-range id.
  std::string push(int32_t id);
  // The rest at the end of the sequence (an incomplete character becomes U+FFFD, as decode does).
  std::string flush();
  // All text returned so far.
  const std::string& text() const { return text_; }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes not yet returned
  std::string text_;
};

}  // namespace nanovllm
