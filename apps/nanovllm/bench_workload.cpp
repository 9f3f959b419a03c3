#include "bench_workload.h"

#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "python_random.h"

namespace nanovllm::cli {

void BenchWorkload::keep_first(int n) {
  if (n <= 0 || n >= static_cast<int>(prompts.size())) return;
  prompts.resize(n);
  max_tokens.resize(n);
}

long long BenchWorkload::total_output_tokens() const {
  return std::accumulate(max_tokens.begin(), max_tokens.end(), 0LL);
}

namespace {
// bench.py's draw: every prompt (its length, then its ids in [0, 10000]), then every max_tokens.
BenchWorkload random_workload(int num_seqs, int min_input_len, int max_input_len, int min_output_len,
                              int max_output_len) {
  constexpr int kMaxTokenId = 10000;
  PythonRandom random(0);
  BenchWorkload w;
  for (int s = 0; s < num_seqs; ++s) {
    std::vector<int32_t>& prompt = w.prompts.emplace_back(random.randint(min_input_len, max_input_len));
    for (int32_t& id : prompt) id = random.randint(0, kMaxTokenId);
  }
  for (int s = 0; s < num_seqs; ++s) w.max_tokens.push_back(random.randint(min_output_len, max_output_len));
  return w;
}
}  // namespace

BenchWorkload nanovllm_bench_workload() { return random_workload(256, 100, 1024, 100, 1024); }

BenchWorkload long_context_bench_workload() {
  BenchWorkload w = random_workload(16, 16384, 30720, 256, 1024);
  w.max_model_len = 32768;
  return w;
}

BenchWorkload read_bench_workload(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidInput("cannot open workload '" + path + "'");
  BenchWorkload w;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    w.prompts = j.at("prompt_token_ids").get<std::vector<std::vector<int32_t>>>();
    w.max_tokens = j.at("max_tokens").get<std::vector<int>>();
    w.temperature = j.value("temperature", w.temperature);
    w.ignore_eos = j.value("ignore_eos", w.ignore_eos);
    w.max_model_len = j.value("max_model_len", w.max_model_len);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidInput("workload '" + path + "': " + e.what());
  }
  if (w.prompts.size() != w.max_tokens.size())
    throw InvalidInput("workload '" + path + "': prompt_token_ids and max_tokens differ in count");
  return w;
}

}  // namespace nanovllm::cli
