// Arbitrary bytes through encode, decode and the streaming detokenizer of Qwen3's tokenizer
// (NANOVLLM_QWEN3_TOKENIZER_DIR or third_party_data/qwen3-tokenizer). Invariants checked, not only crashes:
// invalid UTF-8 is rejected exactly when find_invalid says so; decode(encode(x)) == x with the text between added
// tokens NFC-normalised (added tokens are matched in the raw text, before normalisation, as in HF; NFC of the whole
// text may compose across one, e.g. "<tool_call>" + U+0338); streaming == decode.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/nfc.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

std::filesystem::path tokenizer_dir() {
  const char* env = std::getenv("NANOVLLM_QWEN3_TOKENIZER_DIR");
  return env ? std::filesystem::path(env)
             : std::filesystem::path(NANOVLLM_SOURCE_DIR) / "third_party_data" / "qwen3-tokenizer";
}

const nanovllm::Tokenizer& tokenizer() {
  static const nanovllm::Tokenizer t = nanovllm::Tokenizer::from_model_dir(tokenizer_dir());
  return t;
}

// The added tokens' contents, read from tokenizer.json apart from the tokenizer under test. Qwen3's match anywhere
// (none strips whitespace or needs a word boundary).
const std::vector<std::string>& added_token_contents() {
  static const std::vector<std::string> contents = [] {
    std::ifstream file(tokenizer_dir() / "tokenizer.json");
    const nlohmann::json json = nlohmann::json::parse(file);
    std::vector<std::string> found;
    for (const auto& token : json.at("added_tokens")) found.push_back(token.at("content").get<std::string>());
    return found;
  }();
  return contents;
}

// What decode(encode(text)) must give: the added tokens found leftmost first, longest at a place, kept as they are,
// and the text between them NFC-normalised piece by piece.
std::string normalised_between_added_tokens(std::string_view text) {
  std::string out;
  size_t plain = 0;
  for (size_t i = 0; i < text.size();) {
    size_t longest = 0;
    for (const std::string& c : added_token_contents())
      if (c.size() > longest && text.substr(i, c.size()) == c) longest = c.size();
    if (longest == 0) {
      ++i;
      continue;
    }
    out += nanovllm::nfc_normalize(text.substr(plain, i - plain));
    out += text.substr(i, longest);
    i += longest;
    plain = i;
  }
  return out + nanovllm::nfc_normalize(text.substr(plain));
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

// Loads the tokenizer before fuzzing starts, so the load does not count against the first input's timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer();
  added_token_contents();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nanovllm;
  const Tokenizer& t = tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);

  // Encode: rejected iff not valid UTF-8; otherwise round-trips to the text, NFC between added tokens.
  const bool valid = utf8::find_invalid(text) == utf8::kAllValid;
  try {
    const std::vector<int32_t> ids = t.encode(text);
    check(valid);
    check(t.decode(ids, false) == normalised_between_added_tokens(text));
  } catch (const InvalidInput&) {
    check(!valid);
  }

  // The same bytes as token ids (3 bytes each, some out of range): decode and stream agree.
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 3 <= size; i += 3) {
    ids.push_back(static_cast<int32_t>((data[i] | (data[i + 1] << 8) | (data[i + 2] << 16)) % (t.vocab_size() + 8)));
  }
  for (const bool skip : {false, true}) {
    std::string full;
    bool out_of_range = false;
    try {
      full = t.decode(ids, skip);
    } catch (const InvalidInput&) {
      out_of_range = true;
    }
    StreamingDetokenizer stream(t, {}, skip);
    std::string streamed;
    try {
      for (const int32_t id : ids) {
        const std::string piece = stream.push(id);
        check(utf8::find_invalid(piece) == utf8::kAllValid);
        streamed += piece;
      }
      streamed += stream.flush();
      check(!out_of_range && streamed == full);
      const std::vector<std::string> stops{"\n\n", "<|im_end|>", full.substr(0, 3)};
      if (const auto m = find_stop_string(streamed, streamed.size() / 2, stops)) check(m->cut_at <= streamed.size());
    } catch (const InvalidInput&) {
      check(out_of_range);
    }
  }
  return 0;
}
