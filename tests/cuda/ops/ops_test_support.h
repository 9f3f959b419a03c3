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
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
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

  // A chain of two linears, y = x W1^T and z = y W2^T: random bf16 x [t, k1], W1 [n1, k1] and W2 [n2, n1], as host
  // values and on the GPU (the tests of kernels that start before the previous one has finished).
  struct LinearChain {
    std::vector<float> x, w1, w2;
    Tensor gpu_x, gpu_w1, gpu_w2;
  };
  LinearChain random_linear_chain(int t, int k1, int n1, int n2) {
    LinearChain c;
    c.x = random_bf16_values(rng_, int64_t{t} * k1);
    c.w1 = random_bf16_values(rng_, int64_t{n1} * k1, 0.1f);
    c.w2 = random_bf16_values(rng_, int64_t{n2} * n1, 0.1f);
    c.gpu_x = gpu_bf16(c.x, {t, k1});
    c.gpu_w1 = gpu_bf16(c.w1, {n1, k1});
    c.gpu_w2 = gpu_bf16(c.w2, {n2, n1});
    return c;
  }

  // Runs chain() (y from x, then z from y) eagerly, then as a CUDA graph replayed 20 times with y and z poisoned
  // before each replay (reading y before its kernel has finished gives NaN or stale values); check(z, reference,
  // what) judges each run against the CPU's fp32 y W2^T from the eager y.
  template <class Chain, class Check>
  void expect_chain_replays(const LinearChain& c, const Tensor& y, const Tensor& z, Chain chain, Check check) {
    const int64_t t = y.shape[0], n1 = y.shape[1], n2 = z.shape[1];
    chain();
    Tensor want = cpu_empty(DType::F32, {t, n2});
    cpu_->linear(cpu_f32(read_gpu(y), {t, n1}), cpu_f32(c.w2, {n2, n1}), Tensor(), want);
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
