#pragma once
// Pre-tokenizers split normalized text into the pieces that BPE encodes independently. Qwen2/Qwen3's split
// regex has a hand-written matcher (the hot path); any other Split regex (e.g. Llama 3's) runs through PCRE2
// with its JIT, so a new model needs only its own pattern.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm {

// [begin, end) byte offsets of one piece.
struct Piece {
  uint32_t begin;
  uint32_t end;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the pieces of `text` (valid UTF-8) to `pieces`; together they cover the text in order.
  virtual void split(std::string_view text, std::vector<Piece>& pieces) const = 0;
};

// The Split pattern of Qwen2/Qwen3's tokenizer.json.
inline constexpr std::string_view kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex = true.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::unique_ptr<PreTokenizer> make_qwen2_pretokenizer();
// Matches and the gaps between them are pieces (HF's "Isolated" behaviour). Throws InvalidInput if the
// pattern does not compile.
std::unique_ptr<PreTokenizer> make_regex_pretokenizer(const std::string& pattern);
// The whole text as one piece (no pre-tokenizer).
std::unique_ptr<PreTokenizer> make_whole_text_pretokenizer();

}  // namespace nanovllm
