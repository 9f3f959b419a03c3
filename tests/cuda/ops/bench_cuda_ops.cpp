// Not a test: times each CudaBackend op at Qwen3-0.6B shapes and prints it next to its memory floor.
// Each measurement captures 20 calls into a CUDA graph (as the decode loop runs them) and reports the
// median over 15 replays of (replay time / 20). Linear rotates over enough weight copies to exceed L2, so
// the weights come from device memory as in a real step; the other ops' inputs may sit in L2 (their bytes
// are small at decode sizes, where launch latency dominates anyway).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "common/half_float.h"
#include "tests/cuda/ops/bench_support.h"

namespace nanovllm {
namespace {

using test::graph_time_us;

struct Bench {
  CudaBackend& gpu;
  std::vector<Buffer> keep;
  double read_gbs = 0;

  Tensor tensor(DType dtype, std::initializer_list<int64_t> dims, float scale = 1.0f) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    keep.push_back(gpu.allocate(static_cast<size_t>(n) * dtype_size(dtype)));
    Tensor t = keep.back().view(dtype, dims);
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> dist(-scale, scale);
    if (dtype == DType::BF16 || dtype == DType::F32) {
      std::vector<float> host(static_cast<size_t>(n));
      for (auto& x : host) x = dist(rng);
      if (dtype == DType::F32) {
        gpu.upload(host.data(), t.data, t.bytes());
      } else {
        gpu.upload_converted(host.data(), DType::F32, t.data, n);
      }
    }
    return t;
  }
  Tensor ints(const std::vector<int32_t>& v) {
    keep.push_back(gpu.allocate(v.size() * 4));
    Tensor t = keep.back().view(DType::I32, {static_cast<int64_t>(v.size())});
    gpu.upload(v.data(), t.data, t.bytes());
    return t;
  }

  // call(i) enqueues the i-th call (i selects a rotated input where that matters).
  // Returns microseconds per call.
  double time(const std::string& op, const std::string& shape, double bytes, const std::function<void(int)>& call) {
    const double us = graph_time_us(gpu, call);
    const double floor_us = bytes / (read_gbs * 1e9) * 1e6;
    std::printf("%-20s %-26s %9.2f us  %9.2f us floor  %6.1f%%  %8.0f GB/s\n", op.c_str(), shape.c_str(), us, floor_us,
                100.0 * floor_us / us, bytes / (us * 1e-6) / 1e9);
    return us;
  }
};

void run() {
  CudaBackend gpu(0);
  gpu.reserve(test::qwen3_0_6b_bench_limits());
  Bench b{gpu, {}, gpu.measure_read_bandwidth_gbs(size_t{2} << 30)};
  std::printf("%s, read bandwidth %.0f GB/s (floors below use it)\n", gpu.device_name().c_str(), b.read_gbs);

  const int64_t h = 1024, nh = 16, nkv = 8, d = 128, inter = 3072, vocab = 151936, max_pos = 8192;
  const Tensor table = b.tensor(DType::BF16, {vocab, h});
  const Tensor norm_w = b.tensor(DType::BF16, {h});
  const Tensor head_norm = b.tensor(DType::BF16, {d});
  const Tensor rope = b.tensor(DType::F32, {max_pos, d});
  const int64_t num_blocks = 4096, block = 16;
  KvCacheLayer cache{b.tensor(DType::BF16, {num_blocks, block, nkv, d}),
                     b.tensor(DType::BF16, {num_blocks, block, nkv, d})};
  struct Weight {
    const char* name;
    int64_t n, k;
    std::vector<Tensor> copies;
  };
  std::vector<Weight> weights = {{"qkv", (nh + 2 * nkv) * d, h, {}},
                                 {"o_proj", h, nh * d, {}},
                                 {"gate_up", 2 * inter, h, {}},
                                 {"down", h, inter, {}}};
  for (auto& w : weights) {
    const int64_t bytes = w.n * w.k * 2;
    const int copies = static_cast<int>(std::max<int64_t>(2, (160ll << 20) / bytes + 1));  // > L2
    for (int i = 0; i < copies; ++i) w.copies.push_back(b.tensor(DType::BF16, {w.n, w.k}, 0.05f));
  }
  const Tensor lm_head = b.tensor(DType::BF16, {vocab, h}, 0.05f);

  for (int64_t t : {1, 64, 256, 2048, 8192}) {
    const std::string ts = "T=" + std::to_string(t);
    std::vector<int32_t> ids(t), pos(t), slots(t);
    for (int64_t i = 0; i < t; ++i) {
      ids[i] = static_cast<int32_t>((i * 7919) % vocab);
      pos[i] = static_cast<int32_t>(i % max_pos);
      slots[i] = static_cast<int32_t>(i);
    }
    const Tensor tid = b.ints(ids), tpos = b.ints(pos), tslot = b.ints(slots);
    Tensor x = b.tensor(DType::BF16, {t, h}), res = b.tensor(DType::BF16, {t, h}), y = b.tensor(DType::BF16, {t, h});
    Tensor qkv = b.tensor(DType::BF16, {t, (nh + 2 * nkv) * d}), q = b.tensor(DType::BF16, {t, nh * d});
    Tensor gu = b.tensor(DType::BF16, {t, 2 * inter}), act = b.tensor(DType::BF16, {t, inter});
    b.time("embedding", ts, 2.0 * t * h * 2, [&](int) { gpu.embedding(tid, table, 0, y); });
    b.time("rms_norm", ts, 2.0 * t * h * 2, [&](int) { gpu.rms_norm(x, norm_w, 1e-6f, y); });
    b.time("add_rms_norm", ts, 4.0 * t * h * 2, [&](int) { gpu.add_rms_norm(x, res, norm_w, 1e-6f, y); });
    b.time("qk_norm_rope_cache", ts, t * (2.0 * (nh + 2 * nkv) * d * 2 + d * 4), [&](int) {
      gpu.qk_norm_rope_cache(qkv, head_norm, head_norm, 1e-6f, tpos, rope, tslot, nh, nkv, d, cache, q);
    });
    b.time("silu_and_mul", ts, 3.0 * t * inter * 2, [&](int) { gpu.silu_and_mul(gu, act); });
    for (auto& w : weights) {
      Tensor in = b.tensor(DType::BF16, {t, w.k}), out = b.tensor(DType::BF16, {t, w.n});
      const double bytes = 2.0 * (w.n * w.k + t * w.k + t * w.n);
      const double us = b.time(std::string("linear ") + w.name, ts + " N=" + std::to_string(w.n), bytes,
                               [&](int i) { gpu.linear(in, w.copies[i % w.copies.size()], Tensor(), out); });
      std::printf("%-20s %-26s %9.1f TFLOP/s\n", "", "", 2.0 * t * w.n * w.k / (us * 1e-6) / 1e12);
    }
    if (t <= 512) {
      Tensor logits = b.tensor(DType::F32, {t, vocab}, 8.0f);
      Tensor hidden = b.tensor(DType::BF16, {t, h});
      b.time("linear lm_head", ts, 2.0 * vocab * h + 4.0 * t * vocab,
             [&](int) { gpu.linear(hidden, lm_head, Tensor(), logits); });
      std::vector<float> temp(t, 0.8f), topp(t, 1.0f), minp(t, 0.0f), topp_on(t, 0.9f);
      std::vector<int32_t> topk(t, -1), step(t, 3), topk_on(t, 50);
      std::vector<int64_t> seed(t, 11);
      auto upload = [&](const auto& v, DType dt) {
        b.keep.push_back(gpu.allocate(v.size() * dtype_size(dt)));
        Tensor tt = b.keep.back().view(dt, {static_cast<int64_t>(v.size())});
        gpu.upload(v.data(), tt.data, tt.bytes());
        return tt;
      };
      SamplerInputs plain{upload(temp, DType::F32), upload(topk, DType::I32), upload(topp, DType::F32),
                          upload(minp, DType::F32), upload(seed, DType::I64), upload(step, DType::I32)};
      SamplerInputs filtered = plain;
      filtered.top_k = upload(topk_on, DType::I32);
      filtered.top_p = upload(topp_on, DType::F32);
      Tensor tokens = b.tensor(DType::I32, {t});
      b.time("sample plain", ts, 4.0 * t * vocab, [&](int) { gpu.sample(logits, plain, tokens); });
      b.time("sample top-k/top-p", ts, 4.0 * t * vocab, [&](int) { gpu.sample(logits, filtered, tokens); });
      Tensor lp = b.tensor(DType::F32, {t}), top_ids = b.tensor(DType::I32, {t, 20}),
             top_lp = b.tensor(DType::F32, {t, 20});
      b.time("logprobs k=20", ts, 4.0 * t * vocab, [&](int) { gpu.logprobs(logits, tokens, 20, lp, top_ids, top_lp); });
    }
  }
}

}  // namespace
}  // namespace nanovllm

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  try {
    nanovllm::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
