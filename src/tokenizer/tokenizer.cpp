#include "tokenizer/tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "common/checked_number.h"
#include "common/error.h"
#include "common/json_parse.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/nfc.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace nanovllm {
namespace {

using nlohmann::json;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidInput(path.string() + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json(std::string_view text, const std::string& label) {
  return nanovllm::parse_json<json>(text, label + ": not valid JSON");  // depth-capped
}

// A tokenizer_config.json token field: a string, or an AddedToken object with "content".
std::optional<std::string> token_field(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return std::nullopt;
}

// Errors in tokenizer.json name the file.
struct Failure {
  const std::string& label;
  InvalidInput operator()(const std::string& what) const { return InvalidInput(label + ": " + what); }
};

// model: a BPE model without the options this tokenizer does not implement.
void check_bpe_model(const json& model, const Failure& fail) {
  if (!model.is_object() || model.value("type", std::string("BPE")) != "BPE") {
    throw fail("only BPE models are supported (model.type is " +
               (model.is_object() ? model.value("type", std::string("missing")) : std::string("missing")) + ")");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty()) {
      throw fail(std::string("model.") + key + " is not supported");
    }
  }
  if (model.value("byte_fallback", false)) throw fail("model.byte_fallback is not supported");
  if (!model.contains("vocab") || !model["vocab"].is_object()) throw fail("model.vocab must be an object");
}

// model.vocab; raises max_id to the highest id.
std::unordered_map<std::string, int32_t> read_vocab(const json& model, int32_t& max_id, const Failure& fail) {
  std::unordered_map<std::string, int32_t> vocab;
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 24)) {
      throw fail("model.vocab['" + text + "'] is not a valid id");
    }
    vocab.emplace(text, id.get<int32_t>());
    max_id = std::max(max_id, id.get<int32_t>());
  }
  return vocab;
}

// model.merges: "a b" strings or ["a", "b"] pairs.
std::vector<std::pair<std::string, std::string>> read_merges(const json& model, const Failure& fail) {
  std::vector<std::pair<std::string, std::string>> merges;
  if (model.contains("merges")) {
    if (!model["merges"].is_array()) throw fail("model.merges must be an array");
    for (const json& m : model["merges"]) {
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ', 1);
        if (space == std::string::npos) throw fail("merge '" + s + "' is not two tokens separated by a space");
        merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        throw fail("model.merges holds an entry that is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }
  return merges;
}

// added_tokens; raises max_id to the highest id.
std::vector<AddedToken> read_added_tokens(const json& root, int32_t& max_id, const Failure& fail) {
  std::vector<AddedToken> added;
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    for (const json& a : root["added_tokens"]) {
      AddedToken t;
      try {  // checked: 4294967301 must not wrap to 5 and replace that token
        t.id = checked_integer<int32_t>(a.at("id"), "added_tokens[].id", 0, 1 << 24);
      } catch (const InvalidInput& e) {
        throw fail(e.what());
      }
      t.content = a.at("content").get<std::string>();
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      if (t.id < 0 || t.id > (1 << 24)) throw fail("added token '" + t.content + "' has an invalid id");
      if (t.content.empty() || utf8::find_invalid(t.content) != utf8::kAllValid) {
        throw fail("added token " + std::to_string(t.id) + " has empty or invalid content");
      }
      max_id = std::max(max_id, t.id);
      added.push_back(std::move(t));
    }
  }
  return added;
}

// normalizer: none, NFC or an empty Sequence; true for NFC.
bool read_normalizer(const json& root, const Failure& fail) {
  const json& normalizer = root.value("normalizer", json());
  if (normalizer.is_null()) return false;
  const std::string type = normalizer.value("type", std::string());
  if (type == "NFC") return true;
  if (!(type == "Sequence" && normalizer.value("normalizers", json::array()).empty())) {
    throw fail("normalizer '" + type + "' is not supported (only NFC)");
  }
  return false;
}

// A pre-tokenizer or post-processor: the members of a Sequence (under list_key), else the one step; none for null.
std::vector<json> sequence_steps(const json& step, const char* list_key) {
  std::vector<json> steps;
  if (step.is_object() && step.value("type", std::string()) == "Sequence") {
    for (const json& s : step.value(list_key, json::array())) steps.push_back(s);
  } else if (!step.is_null()) {
    steps.push_back(step);
  }
  return steps;
}

// Decoder: byte-level only.
void check_decoder(const json& root, const Failure& fail) {
  const json& decoder = root.value("decoder", json());
  if (!decoder.is_null() && decoder.value("type", std::string()) != "ByteLevel") {
    throw fail("decoder '" + decoder.value("type", std::string()) + "' is not supported (only ByteLevel)");
  }
}

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PreTokenizer> pretokenizer;
  AddedTokens added;
  bool normalize_nfc = false;
  bool add_prefix_space = false;
  std::vector<int32_t> prefix_ids, suffix_ids;  // from a TemplateProcessing post-processor (e.g. Llama's BOS)

  std::vector<std::string> id_to_text;   // vocabulary text by id
  std::vector<std::string> id_to_bytes;  // decoded bytes by id
  std::vector<uint8_t> special;          // 1 for special added tokens
  std::unordered_map<std::string, int32_t> text_to_id;

  std::optional<std::string> chat_template;
  std::optional<std::string> eos, bos, pad;

  void check_id(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_to_text.size()) {
      throw InvalidInput("token id " + std::to_string(id) + " is out of range [0, " +
                         std::to_string(id_to_text.size()) + ")");
    }
  }

  void encode_segment(std::string_view text, std::vector<int32_t>& ids, const BpeModel::CacheLock& lock) const {
    std::string normalized;
    if (normalize_nfc && !nfc_quick_check(text)) {
      normalized = nfc_normalize(text);
      text = normalized;
    }
    std::string prefixed;
    if (add_prefix_space && !text.empty() && text.front() != ' ') {
      prefixed.reserve(text.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(text);
      text = prefixed;
    }
    thread_local std::vector<Piece> pieces;
    pieces.clear();
    pretokenizer->split(text, pieces);
    for (const Piece& p : pieces) model->encode_word(text.substr(p.begin, p.end - p.begin), ids, lock);
  }

  // Vocabulary tables by id, from the model's vocabulary and the added tokens.
  void build_id_tables(const std::unordered_map<std::string, int32_t>& vocab, const std::vector<AddedToken>& added,
                       int32_t max_id) {
    const ByteLevelAlphabet alphabet;
    const size_t table_size = static_cast<size_t>(max_id) + 1;
    id_to_text.assign(table_size, std::string());
    id_to_bytes.assign(table_size, std::string());
    special.assign(table_size, 0);
    auto set_token = [&](int32_t id, const std::string& text) {
      id_to_text[id] = text;
      // HF's ByteLevel decoder keeps a token's own bytes when it has characters outside the alphabet.
      auto bytes = alphabet.decode_token(text);
      id_to_bytes[id] = bytes ? std::move(*bytes) : text;
      text_to_id[text] = id;
    };
    for (const auto& [text, id] : vocab) set_token(id, text);
    for (const AddedToken& t : added) {
      set_token(t.id, t.content);
      special[t.id] = t.special ? 1 : 0;
    }
  }

  // Pre-tokenizer: Split(regex, Isolated) and/or ByteLevel, alone or in a Sequence.
  void read_pre_tokenizer(const json& root, const Failure& fail) {
    const std::vector<json> steps = sequence_steps(root.value("pre_tokenizer", json()), "pretokenizers");
    std::optional<std::string> pattern;
    for (const json& s : steps) {
      const std::string type = s.value("type", std::string());
      if (type == "Split") {
        if (pattern) throw fail("more than one Split pre-tokenizer is not supported");
        const json& p = s.value("pattern", json());
        if (!p.is_object() || !p.contains("Regex")) throw fail("Split pre-tokenizer needs a Regex pattern");
        if (s.value("behavior", std::string("Isolated")) != "Isolated" || s.value("invert", false)) {
          throw fail("Split pre-tokenizer: only behavior Isolated without invert is supported");
        }
        pattern = p["Regex"].get<std::string>();
      } else if (type == "ByteLevel") {
        add_prefix_space = s.value("add_prefix_space", false);
        if (s.value("use_regex", true)) {
          if (pattern) throw fail("ByteLevel with use_regex after a Split pre-tokenizer is not supported");
          pattern = std::string(kGpt2SplitPattern);
        }
      } else {
        throw fail("pre-tokenizer '" + type + "' is not supported");
      }
    }
    if (!pattern) {
      pretokenizer = make_whole_text_pretokenizer();
    } else if (*pattern == kQwen2SplitPattern) {
      pretokenizer = make_qwen2_pretokenizer();
    } else {
      pretokenizer = make_regex_pretokenizer(*pattern);
    }
  }

  // Post-processor: ByteLevel adds nothing; TemplateProcessing's single-sequence template adds special tokens.
  void read_post_processor(const json& root, const Failure& fail) {
    const json& post = root.value("post_processor", json());
    for (const json& p : sequence_steps(post, "processors")) {
      const std::string type = p.value("type", std::string());
      if (type == "ByteLevel") continue;
      if (type != "TemplateProcessing") throw fail("post-processor '" + type + "' is not supported");
      bool after_sequence = false;
      for (const json& piece : p.at("single")) {
        if (piece.contains("Sequence")) {
          after_sequence = true;
        } else if (piece.contains("SpecialToken")) {
          const std::string name = piece["SpecialToken"].at("id").get<std::string>();
          const json& entry = p.at("special_tokens").at(name);
          for (const json& id : entry.at("ids"))
            (after_sequence ? suffix_ids : prefix_ids).push_back(id.get<int32_t>());
        }
      }
    }
  }

  // tokenizer_config.json: chat template and the named special tokens.
  void read_config(std::string_view config_json, const std::string& config_label) {
    const json config = parse_json(config_json, config_label);
    if (!config.is_object()) throw InvalidInput(config_label + ": expected a JSON object");
    const auto it = config.find("chat_template");
    if (it != config.end() && it->is_string()) {
      chat_template = it->get<std::string>();
    } else if (it != config.end() && it->is_array()) {
      for (const json& named : *it) {
        if (named.is_object() && named.value("name", std::string()) == "default" && named.contains("template")) {
          chat_template = named["template"].get<std::string>();
        }
      }
    }
    eos = token_field(config, "eos_token");
    bos = token_field(config, "bos_token");
    pad = token_field(config, "pad_token");
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_model_dir(const std::filesystem::path& dir) {
  const auto tokenizer_path = dir / "tokenizer.json";
  const auto config_path = dir / "tokenizer_config.json";
  const std::string tokenizer_text = read_file(tokenizer_path);
  const std::string config_text = std::filesystem::exists(config_path) ? read_file(config_path) : std::string();
  Tokenizer t = from_json(tokenizer_text, config_text, tokenizer_path.string(), config_path.string());
  const auto template_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(template_path)) t.impl_->chat_template = read_file(template_path);
  return t;
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               const std::string& tokenizer_label, const std::string& config_label) {
  auto impl = std::make_unique<Impl>();
  const json root = parse_json(tokenizer_json, tokenizer_label);
  const Failure fail{tokenizer_label};
  try {
    if (!root.is_object()) throw fail("expected a JSON object");
    const json& model = root.value("model", json());
    check_bpe_model(model, fail);
    int32_t max_id = -1;
    const std::unordered_map<std::string, int32_t> vocab = read_vocab(model, max_id, fail);
    const std::vector<std::pair<std::string, std::string>> merges = read_merges(model, fail);
    const bool ignore_merges = model.value("ignore_merges", false);
    impl->model = std::make_unique<BpeModel>(vocab, merges, ignore_merges, tokenizer_label);
    std::vector<AddedToken> added = read_added_tokens(root, max_id, fail);
    impl->build_id_tables(vocab, added, max_id);
    impl->added = AddedTokens(std::move(added));
    impl->normalize_nfc = read_normalizer(root, fail);
    impl->read_pre_tokenizer(root, fail);
    check_decoder(root, fail);
    impl->read_post_processor(root, fail);
  } catch (const json::exception& e) {
    throw fail(std::string("unexpected structure: ") + e.what());
  }
  if (!config_json.empty()) impl->read_config(config_json, config_label);
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (const size_t bad = utf8::find_invalid(text); bad != utf8::kAllValid) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned>(static_cast<uint8_t>(text[bad])));
    throw InvalidInput("text is not valid UTF-8: byte " + std::string(hex) + " at offset " + std::to_string(bad) +
                       " does not start a valid sequence");
  }
  std::vector<int32_t> ids(impl_->prefix_ids);
  ids.reserve(text.size() / 3 + 8);
  const BpeModel::CacheLock lock(*impl_->model);
  impl_->added.split(text, [&](std::string_view segment, int32_t added_id) {
    if (added_id >= 0) {
      ids.push_back(added_id);
    } else {
      impl_->encode_segment(segment, ids, lock);
    }
  });
  ids.insert(ids.end(), impl_->suffix_ids.begin(), impl_->suffix_ids.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const int32_t id : ids) {
    impl_->check_id(id);
    if (skip_special_tokens && impl_->special[id]) continue;
    bytes += impl_->id_to_bytes[id];
  }
  return utf8::to_valid_lossy(bytes);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_text.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->text_to_id.find(std::string(token));
  if (it == impl_->text_to_id.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  impl_->check_id(id);
  return impl_->id_to_text[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id] != 0;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id);
  return impl_->id_to_bytes[id];
}

const std::optional<std::string>& Tokenizer::chat_template() const { return impl_->chat_template; }
std::optional<std::string> Tokenizer::eos_token() const { return impl_->eos; }
std::optional<std::string> Tokenizer::bos_token() const { return impl_->bos; }
std::optional<std::string> Tokenizer::pad_token() const { return impl_->pad; }

}  // namespace nanovllm
