// Not a test: times sample() and logprobs() at V = 151936 against their memory floor (one read of the fp32
// logits, R * V * 4 bytes, at the measured read bandwidth). Each row is the median over 15 replays of a CUDA
// graph of 20 calls, divided by 20, as bench_cuda_ops times ops. Two kinds of logits:
//  * flat: uniform in [-8, 8] (bench_cuda_ops's data). Almost no noise can be pruned (every token is within
//    19.6 of the top after / T), so the plain path is bound by Philox + two logs per logit, not memory.
//  * peaked: normal(0, 2.5) plus a few tokens 8-20 above it, like a real model's logits: the pruning skips
//    nearly all noise and the plain path should be memory-bound.
// The plain path is timed on both fast paths (cluster: one read, sm_90; chunked: two reads).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sampler_paths.cuh"
#include "tests/cuda/ops/bench_support.h"

namespace nanovllm {
namespace {

using test::graph_time_us;

constexpr int64_t kVocab = 151936;

struct Bench {
  CudaBackend& gpu;
  std::vector<Buffer> keep;
  double read_gbs = 0;

  template <class T>
  Tensor upload(const std::vector<T>& v, DType dtype, std::initializer_list<int64_t> dims) {
    keep.push_back(gpu.allocate(v.size() * sizeof(T)));
    Tensor t = keep.back().view(dtype, dims);
    gpu.upload(v.data(), t.data, t.bytes());
    return t;
  }
  Tensor empty(DType dtype, std::initializer_list<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    keep.push_back(gpu.allocate(static_cast<size_t>(n) * dtype_size(dtype)));
    return keep.back().view(dtype, dims);
  }

  void time(const std::string& what, int rows, const std::function<void()>& call) {
    const double us = graph_time_us(gpu, [&](int) { call(); });
    const double floor_us = 4.0 * rows * kVocab / (read_gbs * 1e9) * 1e6;
    std::printf("%-34s R=%-4d %9.2f us  floor %7.2f us  %6.1f%% of floor\n", what.c_str(), rows, us, floor_us,
                100.0 * floor_us / us);
  }
};

std::vector<float> flat_logits(int rows, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  std::vector<float> v(static_cast<size_t>(rows) * kVocab);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> peaked_logits(int rows, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 2.5f);
  std::vector<float> v(static_cast<size_t>(rows) * kVocab);
  for (auto& x : v) x = dist(rng);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < 8; ++j) v[static_cast<size_t>(r) * kVocab + rng() % kVocab] += 8.0f + 1.5f * j;
  }
  return v;
}

void run() {
  CudaBackend gpu(0);
  gpu.reserve(test::qwen3_0_6b_bench_limits(static_cast<int>(kVocab)));
  Bench b{gpu, {}, gpu.measure_read_bandwidth_gbs(size_t{2} << 30)};
  std::printf("%s, read bandwidth %.0f GB/s; floor = R * V * 4 bytes at that bandwidth, V = %ld\n",
              gpu.device_name().c_str(), b.read_gbs, static_cast<long>(kVocab));
  Buffer workspace = gpu.allocate(cuda::sampler_workspace_bytes(512, static_cast<int>(kVocab)));
  std::mt19937 rng(1234);

  for (int rows : {1, 64, 256, 512}) {
    const int64_t r = rows;
    const Tensor flat = b.upload(flat_logits(rows, rng), DType::F32, {r, kVocab});
    const Tensor peaked = b.upload(peaked_logits(rows, rng), DType::F32, {r, kVocab});
    auto controls = [&](float temperature, int top_k, float top_p, float min_p) {
      return SamplerInputs{b.upload(std::vector<float>(rows, temperature), DType::F32, {r}),
                           b.upload(std::vector<int32_t>(rows, top_k), DType::I32, {r}),
                           b.upload(std::vector<float>(rows, top_p), DType::F32, {r}),
                           b.upload(std::vector<float>(rows, min_p), DType::F32, {r}),
                           b.upload(std::vector<int64_t>(rows, 11), DType::I64, {r}),
                           b.upload(std::vector<int32_t>(rows, 3), DType::I32, {r})};
    };
    const SamplerInputs plain = controls(0.6f, -1, 1.0f, 0.0f);
    const SamplerInputs greedy = controls(0.0f, -1, 1.0f, 0.0f);
    const SamplerInputs min_p = controls(0.6f, -1, 1.0f, 0.05f);
    const SamplerInputs top_k_top_p = controls(0.8f, 50, 0.9f, 0.0f);
    const SamplerInputs top_p = controls(0.8f, -1, 0.95f, 0.0f);
    Tensor tokens = b.empty(DType::I32, {r});
    auto via = [&](const Tensor& logits, const SamplerInputs& in, cuda::PlainSamplerPath path) {
      cuda::SamplerArgs a;
      a.logits = logits.as<const float>();
      a.temperature = in.temperature.as<const float>();
      a.top_k = in.top_k.as<const int>();
      a.top_p = in.top_p.as<const float>();
      a.min_p = in.min_p.as<const float>();
      a.seed = in.seed.as<const int64_t>();
      a.step = in.step.as<const int>();
      a.token_ids = tokens.as<int>();
      a.rows = rows;
      a.vocab = static_cast<int>(kVocab);
      cuda::launch_sample_via(a, workspace.data(), workspace.bytes(), gpu.stream(), path);
    };
    for (const auto& input : {std::pair<const char*, const Tensor*>{"peaked", &peaked}, {"flat", &flat}}) {
      // Named variables rather than a structured binding: the lambdas below capture them.
      const char* name = input.first;
      const Tensor* logits = input.second;
      const std::string tag = std::string(" (") + name + ")";
      b.time("sample T=0.6" + tag, rows, [&] { gpu.sample(*logits, plain, tokens); });
      b.time("sample T=0.6 chunked path" + tag, rows, [&] { via(*logits, plain, cuda::PlainSamplerPath::kChunked); });
      b.time("sample greedy" + tag, rows, [&] { gpu.sample(*logits, greedy, tokens); });
      b.time("sample T=0.6 min_p=0.05" + tag, rows, [&] { gpu.sample(*logits, min_p, tokens); });
      b.time("sample top_k=50 top_p=0.9" + tag, rows, [&] { gpu.sample(*logits, top_k_top_p, tokens); });
      b.time("sample top_p=0.95" + tag, rows, [&] { gpu.sample(*logits, top_p, tokens); });
      Tensor lp = b.empty(DType::F32, {r}), ids = b.empty(DType::I32, {r, 20}), top = b.empty(DType::F32, {r, 20});
      b.time("logprobs k=20" + tag, rows, [&] { gpu.logprobs(*logits, tokens, 20, lp, ids, top); });
      b.time("logprobs k=0" + tag, rows, [&] { gpu.logprobs(*logits, tokens, 0, lp, ids, top); });
    }
  }
}

}  // namespace
}  // namespace nanovllm

int main() {
  nanovllm::run();
  return 0;
}
