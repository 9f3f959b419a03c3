// Encode throughput on the parity corpus, one thread, warm cache — the same text and method as the HF side in
// tools/hf_tokenizer_reference.py.  Usage: bench_tokenizer [tokenizer_dir] [corpus_dir] [seconds]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tokenizer_test_data.h"

int main(int argc, char** argv) {
  using namespace nanovllm;
  const auto dir =
      argc > 1 ? std::filesystem::path(argv[1]) : test::qwen3_dir().value_or("third_party_data/qwen3-tokenizer");
  const double seconds = argc > 3 ? std::stod(argv[3]) : 5.0;
  try {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(dir);
    const auto docs = argc > 2 ? test::corpus_documents(argv[2]) : test::corpus_documents();
    size_t bytes = 0, tokens = 0;
    for (const auto& [name, text] : docs) {
      bytes += text.size();
      tokens += tokenizer.encode(text).size();  // warm-up, as the HF side
    }
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    size_t rounds = 0;
    double elapsed = 0;
    do {
      for (const auto& [name, text] : docs) {
        const auto ids = tokenizer.encode(text);
        if (ids.size() == static_cast<size_t>(-1)) std::puts("");  // keep the work observable
      }
      ++rounds;
      elapsed = std::chrono::duration<double>(clock::now() - start).count();
    } while (elapsed < seconds);
    std::printf("nanovllm tokenizer encode, 1 thread: %.2f MB/s on %.3f MB (%zu documents, %zu tokens)\n",
                static_cast<double>(bytes * rounds) / elapsed / 1e6, static_cast<double>(bytes) / 1e6, docs.size(),
                tokens);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
