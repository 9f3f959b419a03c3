#pragma once
// What `nanovllm bench` runs by default: nano-vLLM's bench.py workload, or one read from a JSON file.
#include <cstdint>
#include <string>
#include <vector>

namespace nanovllm::cli {

struct BenchWorkload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;  // one per prompt
  float temperature = 0.6f;
  bool ignore_eos = true;
  int max_model_len = 4096;

  // Keeps only the first n requests (n <= 0 or n >= their count: all).
  void keep_first(int n);
  long long total_output_tokens() const;
};

// nano-vLLM's bench.py, drawn with the same generator: seed 0, 256 prompts of random token ids in [0, 10000]
// with lengths in [100, 1024] (each length drawn before its ids), then 256 max_tokens in [100, 1024];
// temperature 0.6, ignore_eos, max_model_len 4096.
BenchWorkload nanovllm_bench_workload();

// Long contexts, drawn the same way: seed 0, 16 prompts of [16384, 30720] random token ids, then 16 max_tokens in
// [256, 1024]; temperature 0.6, ignore_eos, max_model_len 32768. Where prefill attention dominates.
BenchWorkload long_context_bench_workload();

// A JSON object with "prompt_token_ids" (lists of ids) and "max_tokens" (one per prompt), and optionally
// "temperature", "ignore_eos" and "max_model_len". Throws InvalidInput naming the file and what is wrong.
BenchWorkload read_bench_workload(const std::string& path);

}  // namespace nanovllm::cli
