#pragma once
// Helpers shared by the engine tests: random token lists and configs.
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/sequence.h"
#include "nanovllm/config.h"

namespace nanovllm::test {

// Random token ids in [100, 150000): never 0, never the small ids the tests use as EOS / stop tokens.
inline std::vector<int32_t> random_tokens(std::mt19937& rng, int count) {
  std::uniform_int_distribution<int32_t> dist(100, 149999);
  std::vector<int32_t> tokens(count);
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline EngineConfig small_config(int block_size, int max_num_batched_tokens, int max_num_seqs, int max_model_len,
                                 StepPolicy step_policy = EngineConfig{}.step_policy) {
  EngineConfig config;
  config.step_policy = step_policy;
  config.model = "test";
  config.kvcache_block_size = block_size;
  config.max_num_batched_tokens = max_num_batched_tokens;
  config.max_num_seqs = max_num_seqs;
  config.max_model_len = max_model_len;
  return config;
}

// "DecodeFirst" / "PrefillFirst", for test names.
inline const char* step_policy_name(StepPolicy policy) {
  return policy == StepPolicy::DecodeFirst ? "DecodeFirst" : "PrefillFirst";
}

inline SamplingParams params_with(int max_tokens, bool ignore_eos = true) {
  SamplingParams params;
  params.max_tokens = max_tokens;
  params.ignore_eos = ignore_eos;
  return params;
}

}  // namespace nanovllm::test

namespace nanovllm::test {

// A deterministic stand-in for the model: the token sampled after `position` tokens of sequence `seq_id`.
// Recomputing a preempted sequence therefore reproduces the same tokens. Never below 100.
inline int32_t fake_next_token(int64_t seq_id, int position) {
  uint64_t x = static_cast<uint64_t>(seq_id) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(position) + 1;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<int32_t>(100 + x % 149900);
}

}  // namespace nanovllm::test
