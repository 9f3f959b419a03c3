// Rough speed of the CPU backend's hot ops at Qwen3-0.6B shapes (hidden 1024, 16 q / 8 kv heads of 128,
// intermediate 3072, vocab 151936): GFLOP/s and GB/s of weights for linear, milliseconds for attention.
// Usage: bench_cpu_ops [threads]   (not a test; numbers depend on the machine)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace {

using nanovllm::Buffer;
using nanovllm::CpuBackend;
using nanovllm::DType;
using nanovllm::Tensor;

struct Owned {
  Buffer buffer;
  Tensor tensor;
};

Owned make_f32(CpuBackend& backend, std::initializer_list<int64_t> dims, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  Owned o{backend.allocate(static_cast<size_t>(n) * 4), {}};
  o.tensor = o.buffer.view(DType::F32, dims);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) o.tensor.as<float>()[i] = dist(rng);
  return o;
}

Owned make_i32(CpuBackend& backend, const std::vector<int32_t>& values) {
  Owned o{backend.allocate(values.size() * 4), {}};
  o.tensor = o.buffer.view(DType::I32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) o.tensor.as<int32_t>()[i] = values[i];
  return o;
}

// Wall seconds per call; with NANOVLLM_BENCH_CPU_TIME=1, process CPU seconds per call instead, which a busy
// shared machine disturbs less (meaningful with one thread).
template <class F>
double seconds_per_call(F&& f) {
  static const bool cpu_time = std::getenv("NANOVLLM_BENCH_CPU_TIME") != nullptr;
  f();  // warm-up
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  double elapsed = 0.0;
  do {
    f();
    ++calls;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < 0.5 && calls < 10000);
  if (cpu_time) return static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC / calls;
  return elapsed / calls;
}

void bench_linear(CpuBackend& backend, const char* what, int64_t tokens, int64_t n, int64_t k, std::mt19937& rng) {
  Owned x = make_f32(backend, {tokens, k}, rng);
  Owned w = make_f32(backend, {n, k}, rng);
  Owned y = make_f32(backend, {tokens, n}, rng);
  const Tensor no_bias;
  const double s = seconds_per_call([&] { backend.linear(x.tensor, w.tensor, no_bias, y.tensor); });
  std::printf("linear %-9s T=%-4lld %6lld x %-6lld %9.3f ms %8.1f GFLOP/s %7.1f GB/s of weights\n", what,
              static_cast<long long>(tokens), static_cast<long long>(n), static_cast<long long>(k), s * 1e3,
              2.0 * tokens * n * k / s * 1e-9, 4.0 * n * k / s * 1e-9);
}

void bench_attention(CpuBackend& backend, int num_seqs, int q_len, int k_len, std::mt19937& rng) {
  const int nh = 16, nkv = 8, d = 128, block_size = 256;
  const int blocks_per_seq = (k_len + block_size - 1) / block_size;
  const int tokens = num_seqs * q_len;
  Owned q = make_f32(backend, {tokens, nh * d}, rng);
  Owned out = make_f32(backend, {tokens, nh * d}, rng);
  Owned k = make_f32(backend, {num_seqs * blocks_per_seq, block_size, nkv, d}, rng);
  Owned v = make_f32(backend, {num_seqs * blocks_per_seq, block_size, nkv, d}, rng);
  std::vector<int32_t> cu(1, 0), lens, table;
  for (int s = 0; s < num_seqs; ++s) {
    cu.push_back(cu.back() + q_len);
    lens.push_back(k_len);
    for (int b = 0; b < blocks_per_seq; ++b) table.push_back(s * blocks_per_seq + b);
  }
  Owned cu_t = make_i32(backend, cu), lens_t = make_i32(backend, lens), table_t = make_i32(backend, table);
  nanovllm::AttentionBatch batch;
  batch.cu_seqlens_q = cu_t.tensor;
  batch.seq_lens_k = lens_t.tensor;
  batch.block_tables = table_t.tensor;
  batch.num_seqs = num_seqs;
  batch.max_seqlen_q = q_len;
  batch.max_seqlen_k = k_len;
  batch.max_blocks_per_seq = blocks_per_seq;
  batch.block_size = block_size;
  batch.decode_only = q_len == 1;
  nanovllm::KvCacheLayer cache{k.tensor, v.tensor};
  const double s =
      seconds_per_call([&] { backend.paged_attention(q.tensor, cache, batch, nh, nkv, d, 0.0883883f, out.tensor); });
  std::printf("attention seqs=%-3d q_len=%-5d k_len=%-5d %9.3f ms (one layer)\n", num_seqs, q_len, k_len, s * 1e3);
}

void bench_sampling(CpuBackend& backend, int rows, float temperature, int top_k, float top_p, std::mt19937& rng) {
  const int64_t vocab = 151936;
  Owned logits = make_f32(backend, {rows, vocab}, rng);
  for (int64_t i = 0; i < logits.tensor.numel(); ++i) logits.tensor.as<float>()[i] *= 8.0f;
  std::vector<float> temps(rows, temperature), top_ps(rows, top_p), min_ps(rows, 0.0f);
  std::vector<int32_t> top_ks(rows, top_k), steps(rows, 5), tokens(rows, 0);
  Owned temp_t{backend.allocate(rows * 4), {}}, top_p_t{backend.allocate(rows * 4), {}};
  Owned min_p_t{backend.allocate(rows * 4), {}}, seed_t{backend.allocate(rows * 8), {}};
  temp_t.tensor = temp_t.buffer.view(DType::F32, {rows});
  top_p_t.tensor = top_p_t.buffer.view(DType::F32, {rows});
  min_p_t.tensor = min_p_t.buffer.view(DType::F32, {rows});
  seed_t.tensor = seed_t.buffer.view(DType::I64, {rows});
  for (int r = 0; r < rows; ++r) {
    temp_t.tensor.as<float>()[r] = temperature;
    top_p_t.tensor.as<float>()[r] = top_p;
    min_p_t.tensor.as<float>()[r] = 0.0f;
    seed_t.tensor.as<int64_t>()[r] = 1000 + r;
  }
  Owned top_k_t = make_i32(backend, top_ks), step_t = make_i32(backend, steps), out_t = make_i32(backend, tokens);
  const nanovllm::SamplerInputs in{temp_t.tensor,  top_k_t.tensor, top_p_t.tensor,
                                   min_p_t.tensor, seed_t.tensor,  step_t.tensor};
  const double s = seconds_per_call([&] { backend.sample(logits.tensor, in, out_t.tensor); });
  std::printf("sample rows=%-3d T=%.1f top_k=%-3d top_p=%.2f V=151936 %9.3f ms\n", rows, temperature, top_k, top_p,
              s * 1e3);
  Owned target_lp = make_f32(backend, {rows}, rng), top_lp = make_f32(backend, {rows, 20}, rng);
  Owned top_ids = make_i32(backend, std::vector<int32_t>(rows * 20, 0));
  top_ids.tensor = top_ids.tensor.reshaped({rows, 20});
  const double l = seconds_per_call(
      [&] { backend.logprobs(logits.tensor, out_t.tensor, 20, target_lp.tensor, top_ids.tensor, top_lp.tensor); });
  std::printf("logprobs rows=%-3d k=20 V=151936 %9.3f ms\n", rows, l * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  CpuBackend backend = argc > 1 ? CpuBackend(std::atoi(argv[1])) : CpuBackend();
  std::printf("cpu backend, %d threads\n", backend.num_threads());
  std::mt19937 rng(7);
  for (int64_t tokens : {1, 2, 4, 8, 16, 64, 512}) {
    bench_linear(backend, "qkv", tokens, 4096, 1024, rng);
    bench_linear(backend, "o_proj", tokens, 1024, 2048, rng);
    bench_linear(backend, "gate_up", tokens, 6144, 1024, rng);
    bench_linear(backend, "down", tokens, 1024, 3072, rng);
  }
  bench_linear(backend, "lm_head", 1, 151936, 1024, rng);
  bench_linear(backend, "lm_head", 8, 151936, 1024, rng);
  bench_attention(backend, 1, 1, 1024, rng);
  bench_attention(backend, 8, 1, 1024, rng);
  bench_attention(backend, 1, 1, 8192, rng);
  bench_attention(backend, 1, 512, 512, rng);
  bench_sampling(backend, 1, 0.0f, 0, 1.0f, rng);
  bench_sampling(backend, 1, 1.0f, 0, 1.0f, rng);
  bench_sampling(backend, 1, 0.7f, 20, 0.95f, rng);
  bench_sampling(backend, 1, 0.7f, 0, 0.9f, rng);
  return 0;
}
