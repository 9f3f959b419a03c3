#pragma once
// A Hugging Face tokenizer.json BPE tokenizer (Qwen2/Qwen3 and other byte-level BPE models), identical to HF
// tokenizers in its ids. Input text must be valid UTF-8 (InvalidInput names the offset of the first bad byte);
// decode turns invalid byte sequences into U+FFFD exactly as HF does.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm {

class Tokenizer {
 public:
  // Reads dir/tokenizer.json and dir/tokenizer_config.json (optional; chat_template.jinja wins if present).
  // Throws InvalidInput naming the file on errors.
  static Tokenizer from_model_dir(const std::filesystem::path& dir);
  // The same from file contents; `config_json` may be empty. Names in errors use the given labels.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json,
                             const std::string& tokenizer_label = "tokenizer.json",
                             const std::string& config_label = "tokenizer_config.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // As HF's tokenizer(text)["input_ids"]: added/special tokens in the text are matched first; Qwen adds no BOS.
  std::vector<int32_t> encode(std::string_view text) const;
  // Throws InvalidInput for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // Highest id + 1, added tokens included.
  int32_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The vocabulary entry's text (byte-level alphabet for BPE tokens); empty if the id is unused.
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // The raw bytes a token decodes to (before UTF-8 repair); empty for unused ids. Throws for out-of-range ids.
  std::string_view token_bytes(int32_t id) const;

  const std::optional<std::string>& chat_template() const;
  std::optional<std::string> eos_token() const;
  std::optional<std::string> bos_token() const;
  std::optional<std::string> pad_token() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanovllm
