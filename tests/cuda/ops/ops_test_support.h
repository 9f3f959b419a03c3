#pragma once
// Shared pieces of the CudaBackend op tests. Inputs are drawn at random (never zeros), rounded to bf16 on
// the host, and the same values are given to the CPU backend (fp32) and the CUDA backend (bf16), so the
// comparison measures only the CUDA backend's own arithmetic and its output rounding. Every GPU output is
// poisoned with NaN first (bytes 0xFF: NaN in bf16 and f32, -1 in I32), so an element a kernel forgets to
// write fails the comparison.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.h"
#include "common/half_float.h"

namespace nanovllm::test {

inline bool cuda_device_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Values in [-scale, scale] with |x| >= scale / 64, rounded to bf16.
inline std::vector<float> random_bf16_values(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) {
    float r = dist(rng);
    if (std::fabs(r) < 1.0f / 64) r = r < 0 ? -1.0f / 64 : 1.0f / 64;
    x = bf16_to_float(float_to_bf16(r * scale));
  }
  return v;
}

// Random finite E4M3 codes of both signs (never the NaN code): FP8 weights' codes.
inline std::vector<uint8_t> random_fp8_codes(std::mt19937& rng, int64_t n) {
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  for (auto& c : codes) {
    c = static_cast<uint8_t>(rng());
    if ((c & 0x7f) == 0x7f) c ^= 1;
  }
  return codes;
}

// Block scales of 1e-3..1e-2: with random_fp8_codes, weights of ~0.1.
inline std::vector<float> random_fp8_scales(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> dist(1e-3f, 1e-2f);
  std::vector<float> scales(static_cast<size_t>(n));
  for (auto& s : scales) s = dist(rng);
  return scales;
}

inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1.0));
}

// Every GPU element finite, and ||got - want|| / ||want|| <= tolerance.
inline void expect_rel_l2(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                          const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(want[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " (want " << want[i]
                    << "): not written or overflowed";
      return;
    }
  }
  const double err = rel_l2(got, want);
  EXPECT_LE(err, tolerance) << what << ": relative L2 error " << err;
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<CudaBackend>(0);
    cpu_ = std::make_unique<CpuBackend>();
    BackendLimits limits;
    limits.max_num_tokens = 4096;
    limits.max_num_seqs = 64;
    limits.max_model_len = 4096;
    limits.max_logits_rows = 4096;
    limits.num_heads = 32;
    limits.num_kv_heads = 8;
    limits.head_dim = 128;
    limits.vocab_size = 151936;
    gpu_->reserve(limits);
    cpu_->reserve(limits);
  }

  CudaBackend& gpu() { return *gpu_; }
  CpuBackend& cpu() { return *cpu_; }

  // --- GPU tensors (kept alive by the fixture) ---
  Tensor gpu_empty(DType dtype, std::initializer_list<int64_t> dims, bool poison = true) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    buffers_.push_back(gpu_->allocate(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(dtype)));
    Tensor t = buffers_.back().view(dtype, dims);
    if (poison && n > 0) {
      std::vector<unsigned char> ff(t.bytes(), 0xFF);
      gpu_->upload(ff.data(), t.data, t.bytes());
    }
    return t;
  }
  Tensor gpu_bf16(const std::vector<float>& values, std::initializer_list<int64_t> dims) {
    Tensor t = gpu_empty(DType::BF16, dims, false);
    EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
    gpu_->upload_converted(values.data(), DType::F32, t.data, t.numel());
    return t;
  }
  template <class T>
  Tensor gpu_raw(const std::vector<T>& values, DType dtype, std::initializer_list<int64_t> dims) {
    Tensor t = gpu_empty(dtype, dims, false);
    EXPECT_EQ(values.size() * sizeof(T), t.bytes());
    gpu_->upload(values.data(), t.data, t.bytes());
    return t;
  }
  // Downloads any float tensor (BF16 or F32) as floats.
  std::vector<float> read_gpu(const Tensor& t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    if (t.dtype == DType::F32) {
      gpu_->download(t.data, out.data(), t.bytes());
    } else {
      std::vector<uint16_t> raw(out.size());
      gpu_->download(t.data, raw.data(), t.bytes());
      for (size_t i = 0; i < raw.size(); ++i) out[i] = bf16_to_float(raw[i]);
    }
    return out;
  }
  std::vector<uint8_t> read_gpu_bytes(const Tensor& t) {
    std::vector<uint8_t> out(t.bytes());
    gpu_->download(t.data, out.data(), t.bytes());
    return out;
  }
  std::vector<int32_t> read_gpu_i32(const Tensor& t) {
    std::vector<int32_t> out(static_cast<size_t>(t.numel()));
    gpu_->download(t.data, out.data(), t.bytes());
    return out;
  }

  // --- CPU tensors ---
  Tensor cpu_empty(DType dtype, std::initializer_list<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    buffers_.push_back(cpu_->allocate(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(dtype)));
    Tensor t = buffers_.back().view(dtype, dims);
    if (n > 0) std::memset(t.data, 0xFF, t.bytes());
    return t;
  }
  template <class T>
  Tensor cpu_raw(const std::vector<T>& values, DType dtype, std::initializer_list<int64_t> dims) {
    Tensor t = cpu_empty(dtype, dims);
    EXPECT_EQ(values.size() * sizeof(T), t.bytes());
    std::memcpy(t.data, values.data(), t.bytes());
    return t;
  }
  Tensor cpu_f32(const std::vector<float>& values, std::initializer_list<int64_t> dims) {
    return cpu_raw(values, DType::F32, dims);
  }
  static std::vector<float> read_cpu(const Tensor& t) {
    return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
  }

  // Linears on one random bf16 weight [n, k] and bias [n]: for each token count t that take(t) admits, with and
  // without bias, body(t, bias, x, weight, bias or null, reference) with the CPU's fp32 x W^T (+ bias) as reference.
  // The operands are device bf16 pointers; body returns false to stop (a failure).
  template <class Take, class Body>
  void for_each_random_linear(int n, int k, const std::vector<int>& token_counts, Take take, Body body) {
    const auto w = random_bf16_values(rng_, int64_t{n} * k, 0.1f);
    const auto b = random_bf16_values(rng_, n);
    const Tensor gpu_w = gpu_bf16(w, {n, k}), gpu_b = gpu_bf16(b, {n});
    const Tensor cpu_w = cpu_f32(w, {n, k}), cpu_b = cpu_f32(b, {n});
    for (int t : token_counts) {
      if (!take(t)) continue;
      const auto x = random_bf16_values(rng_, int64_t{t} * k);
      const Tensor gpu_x = gpu_bf16(x, {t, k});
      for (bool bias : {false, true}) {
        Tensor want = cpu_empty(DType::F32, {t, n});
        cpu_->linear(cpu_f32(x, {t, k}), cpu_w, bias ? cpu_b : Tensor(), want);
        if (!body(t, bias, gpu_x.as<__nv_bfloat16>(), gpu_w.as<__nv_bfloat16>(),
                  bias ? gpu_b.as<__nv_bfloat16>() : nullptr, read_cpu(want)))
          return;
      }
    }
  }

  // A chain of two linears on the kernel under test, y = x W1^T and z = y W2^T (random bf16 x [t, k1], W1 [n1, k1],
  // W2 [n2, n1]; y bf16, z of z_dtype): link(in, weight, out, n, k) enqueues one of them. Runs the chain eagerly,
  // then as a CUDA graph replayed 20 times with y and z poisoned before each replay (reading y before its kernel has
  // finished gives NaN or stale values); check(z, reference, what) judges each run against the CPU's fp32 y W2^T
  // from the eager y.
  template <class Link, class Check>
  void expect_chain_replays(int t, int k1, int n1, int n2, DType z_dtype, Link link, Check check) {
    const Tensor x = gpu_bf16(random_bf16_values(rng_, int64_t{t} * k1), {t, k1});
    const Tensor w1 = gpu_bf16(random_bf16_values(rng_, int64_t{n1} * k1, 0.1f), {n1, k1});
    const std::vector<float> w2_values = random_bf16_values(rng_, int64_t{n2} * n1, 0.1f);
    const Tensor w2 = gpu_bf16(w2_values, {n2, n1});
    Tensor y = gpu_empty(DType::BF16, {t, n1}), z = gpu_empty(z_dtype, {t, n2});
    const auto chain = [&] {
      link(x, w1, y, n1, k1);
      link(y, w2, z, n2, n1);
    };
    chain();
    Tensor want = cpu_empty(DType::F32, {t, n2});
    cpu_->linear(cpu_f32(read_gpu(y), {t, n1}), cpu_f32(w2_values, {n2, n1}), Tensor(), want);
    const auto reference = read_cpu(want);
    check(read_gpu(z), reference, std::string("eager"));
    const std::vector<unsigned char> poison_y(y.bytes(), 0xFF), poison_z(z.bytes(), 0xFF);
    CudaGraph graph = gpu_->capture(chain);
    for (int replay = 0; replay < 20 && !::testing::Test::HasFailure(); ++replay) {
      gpu_->upload(poison_y.data(), y.data, y.bytes());
      gpu_->upload(poison_z.data(), z.data, z.bytes());
      gpu_->replay(graph);
      check(read_gpu(z), reference, "graph replay " + std::to_string(replay));
    }
  }

  // A folded norm's residual call (GemvArgs, gemv.h) on x [t, k] and weight [n, k]: its residual (from
  // residual_values), its residual x weight output (NaN-poisoned), the sums it adds to (zeroed) and 3 stale sums it
  // must zero (not zero). After the call, finish() reads them back, and fails the test where a stale sum was not
  // zeroed.
  struct ResidualCall {
    cuda::GemvArgs args;
    Tensor residual, out, sums, stale;
    std::vector<float> residual_values, out_values;  // after the call
    std::vector<int64_t> sum_words;
  };
  static constexpr int64_t kNormSumWords = sizeof(cuda::GemvNormSum) / sizeof(int64_t);
  ResidualCall residual_call(const Tensor& x, const Tensor& weight, const Tensor& norm_weight,
                             const std::vector<float>& residual_values, int t, int n, int k) {
    ResidualCall c;
    c.residual = gpu_bf16(residual_values, {t, n});
    c.out = gpu_empty(DType::BF16, {t, n});
    c.sums = gpu_raw(std::vector<int64_t>(static_cast<size_t>(t * kNormSumWords), 0), DType::I64, {t, kNormSumWords});
    c.stale = gpu_raw(std::vector<int64_t>(static_cast<size_t>(3 * kNormSumWords), 7), DType::I64, {3, kNormSumWords});
    c.args = {x.as<__nv_bfloat16>(), weight.as<__nv_bfloat16>(), nullptr, c.out.data, DType::BF16, t, n, k};
    c.args.norm.residual = static_cast<__nv_bfloat16*>(c.residual.data);
    c.args.norm.norm_weight = norm_weight.as<__nv_bfloat16>();
    c.args.norm.sum_squares = static_cast<cuda::GemvNormSum*>(c.sums.data);
    c.args.norm.stale_sums = static_cast<cuda::GemvNormSum*>(c.stale.data), c.args.norm.stale_sum_count = 3;
    return c;
  }
  void finish(ResidualCall& c, const std::string& where) {
    c.residual_values = read_gpu(c.residual), c.out_values = read_gpu(c.out);
    c.sum_words.resize(static_cast<size_t>(c.sums.numel()));
    gpu_->download(c.sums.data, c.sum_words.data(), c.sums.bytes());
    std::vector<int64_t> stale_words(static_cast<size_t>(c.stale.numel()));
    gpu_->download(c.stale.data, stale_words.data(), c.stale.bytes());
    for (int r = 0; r < 3; ++r) {
      const size_t at = static_cast<size_t>(r * kNormSumWords);
      ASSERT_TRUE(stale_words[at] == 0 && stale_words[at + 16] == 0) << where << ": stale sums not zeroed";
    }
  }
  // The sums a folded norm's input call reads (GemvArgs::input_sum_squares): token r's is 1000 (r + 1).
  Tensor input_norm_sums(int t) {
    std::vector<int64_t> words(static_cast<size_t>(t * kNormSumWords), 0);
    for (int r = 0; r < t; ++r) words[static_cast<size_t>(r * kNormSumWords)] = 1000 * (r + 1);  // whole parts
    return gpu_raw(words, DType::I64, {t, kNormSumWords});
  }
  // A token's sum of squares from ResidualCall::sum_words (GemvNormSum's whole and fraction words).
  static double norm_sum_of(const std::vector<int64_t>& words, int token) {
    const size_t at = static_cast<size_t>(token * kNormSumWords);
    return static_cast<double>(words[at]) + std::ldexp(static_cast<double>(words[at + 16]), -40);
  }

  std::mt19937 rng_{12345};

 private:
  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<CpuBackend> cpu_;
  std::vector<Buffer> buffers_;

 protected:
  void TearDown() override {
    buffers_.clear();  // device buffers go before the backend
  }
};

}  // namespace nanovllm::test
