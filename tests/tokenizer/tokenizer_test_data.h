#pragma once
// Shared helpers: where the Qwen3 tokenizer and the corpus live, and the corpus documents in the order
// tools/hf_tokenizer_reference.py writes them.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace nanovllm::test {

inline std::filesystem::path source_dir() { return NANOVLLM_SOURCE_DIR; }

// NANOVLLM_QWEN3_TOKENIZER_DIR or third_party_data/qwen3-tokenizer (scripts/fetch_tokenizer.sh).
inline std::optional<std::filesystem::path> qwen3_dir() {
  if (const char* env = std::getenv("NANOVLLM_QWEN3_TOKENIZER_DIR")) return std::filesystem::path(env);
  const auto dir = source_dir() / "third_party_data" / "qwen3-tokenizer";
  if (std::filesystem::exists(dir / "tokenizer.json")) return dir;
  return std::nullopt;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// (name, text): every *.txt of the corpus in name order, then the strings of snippets.json.
inline std::vector<std::pair<std::string, std::string>> corpus_documents(
    const std::filesystem::path& dir = source_dir() / "tools" / "tokenizer_corpus") {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".txt") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::pair<std::string, std::string>> docs;
  for (const auto& f : files) docs.emplace_back(f.filename().string(), read_file(f));
  const auto snippets = nlohmann::json::parse(read_file(dir / "snippets.json"));
  for (size_t i = 0; i < snippets.size(); ++i)
    docs.emplace_back("snippets.json[" + std::to_string(i) + "]", snippets[i].get<std::string>());
  return docs;
}

// Fixture folders: the committed HF outputs, plus NANOVLLM_TOKENIZER_FIXTURES (e.g. the transformers.js stand-in).
inline std::vector<std::filesystem::path> fixture_dirs() {
  std::vector<std::filesystem::path> dirs{source_dir() / "tests" / "fixtures" / "tokenizer"};
  if (const char* env = std::getenv("NANOVLLM_TOKENIZER_FIXTURES")) dirs.emplace_back(env);
  return dirs;
}

inline const Tokenizer& qwen3() {
  static const Tokenizer t = Tokenizer::from_model_dir(*qwen3_dir());
  return t;
}

}  // namespace nanovllm::test

#define REQUIRE_QWEN3()                                                                       \
  do {                                                                                        \
    if (!nanovllm::test::qwen3_dir()) GTEST_SKIP() << "run scripts/fetch_tokenizer.sh first"; \
  } while (0)
