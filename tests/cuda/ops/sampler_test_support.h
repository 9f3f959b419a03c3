#pragma once
// Per-row sampling controls, built once and handed to either backend; sample() and sample_shard() on both.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {

struct SamplerRows {
  std::vector<float> temperature, top_p, min_p;
  std::vector<int32_t> top_k, step;
  std::vector<int64_t> seed;

  void add(float t, int k, float p, float minp, int64_t s, int32_t st) {
    temperature.push_back(t);
    top_k.push_back(k);
    top_p.push_back(p);
    min_p.push_back(minp);
    seed.push_back(s);
    step.push_back(st);
  }
  int64_t rows() const { return static_cast<int64_t>(temperature.size()); }
};

class SamplerTest : public CudaOpsTest {
 protected:
  SamplerInputs gpu_inputs(const SamplerRows& r) {
    const int64_t n = r.rows();
    return {gpu_raw(r.temperature, DType::F32, {n}), gpu_raw(r.top_k, DType::I32, {n}),
            gpu_raw(r.top_p, DType::F32, {n}),       gpu_raw(r.min_p, DType::F32, {n}),
            gpu_raw(r.seed, DType::I64, {n}),        gpu_raw(r.step, DType::I32, {n})};
  }
  SamplerInputs cpu_inputs(const SamplerRows& r) {
    const int64_t n = r.rows();
    return {cpu_raw(r.temperature, DType::F32, {n}), cpu_raw(r.top_k, DType::I32, {n}),
            cpu_raw(r.top_p, DType::F32, {n}),       cpu_raw(r.min_p, DType::F32, {n}),
            cpu_raw(r.seed, DType::I64, {n}),        cpu_raw(r.step, DType::I32, {n})};
  }
  std::vector<int32_t> sample_gpu(const std::vector<float>& logits, int64_t vocab, const SamplerRows& r) {
    Tensor ids = gpu_empty(DType::I32, {r.rows()});
    gpu().sample(gpu_raw(logits, DType::F32, {r.rows(), vocab}), gpu_inputs(r), ids);
    return read_gpu_i32(ids);
  }
  std::vector<int32_t> sample_cpu(const std::vector<float>& logits, int64_t vocab, const SamplerRows& r) {
    Tensor ids = cpu_empty(DType::I32, {r.rows()});
    cpu().sample(cpu_raw(logits, DType::F32, {r.rows(), vocab}), cpu_inputs(r), ids);
    return std::vector<int32_t>(ids.as<int32_t>(), ids.as<int32_t>() + r.rows());
  }
  // --- sample_shard: one vocabulary shard [begin, begin + chunk) of logits [rows, vocab], the columns past
  // the vocabulary holding `pad` (the last rank's padding) ---
  struct ShardPicks {
    std::vector<float> key;
    std::vector<int32_t> token;
  };
  static std::vector<float> shard_columns(const std::vector<float>& logits, int64_t vocab, int64_t rows, int64_t begin,
                                          int64_t chunk, float pad) {
    const int64_t valid = shard_valid(vocab, begin, chunk);
    std::vector<float> part(static_cast<size_t>(rows * chunk), pad);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(logits.begin() + r * vocab + begin, logits.begin() + r * vocab + begin + valid,
                part.begin() + r * chunk);
    }
    return part;
  }
  static int64_t shard_valid(int64_t vocab, int64_t begin, int64_t chunk) {
    return std::clamp<int64_t>(vocab - begin, 0, chunk);
  }
  ShardPicks sample_shard_gpu(const std::vector<float>& logits, int64_t vocab, int64_t begin, int64_t chunk, float pad,
                              const SamplerRows& r) {
    const int64_t rows = r.rows();
    Tensor key = gpu_empty(DType::F32, {rows});
    Tensor token = gpu_empty(DType::I32, {rows});
    gpu().sample_shard(gpu_raw(shard_columns(logits, vocab, rows, begin, chunk, pad), DType::F32, {rows, chunk}), begin,
                       shard_valid(vocab, begin, chunk), gpu_inputs(r), key, token);
    return {read_gpu(key), read_gpu_i32(token)};
  }
  ShardPicks sample_shard_cpu(const std::vector<float>& logits, int64_t vocab, int64_t begin, int64_t chunk, float pad,
                              const SamplerRows& r) {
    const int64_t rows = r.rows();
    Tensor key = cpu_empty(DType::F32, {rows});
    Tensor token = cpu_empty(DType::I32, {rows});
    cpu().sample_shard(cpu_raw(shard_columns(logits, vocab, rows, begin, chunk, pad), DType::F32, {rows, chunk}), begin,
                       shard_valid(vocab, begin, chunk), cpu_inputs(r), key, token);
    return {read_cpu(key), std::vector<int32_t>(token.as<int32_t>(), token.as<int32_t>() + rows)};
  }
  // The engine's merge (Backend::merge_shard_pick, then ShardPick::sampled_token).
  static ShardPicks merge_shards(const std::vector<ShardPicks>& shards, int64_t rows) {
    ShardPicks m{std::vector<float>(static_cast<size_t>(rows)), std::vector<int32_t>(static_cast<size_t>(rows))};
    for (int64_t r = 0; r < rows; ++r) {
      Backend::ShardPick best;
      for (const ShardPicks& s : shards) Backend::merge_shard_pick(best, s.key[r], s.token[r]);
      m.key[r] = best.key;
      m.token[r] = best.sampled_token();
    }
    return m;
  }

  std::vector<float> random_logits(int64_t rows, int64_t vocab, float stddev = 3.0f) {
    std::normal_distribution<float> dist(0.0f, stddev);
    std::vector<float> v(static_cast<size_t>(rows * vocab));
    for (auto& x : v) x = dist(rng_);
    return v;
  }
};

}  // namespace nanovllm::test
