#pragma once
// Per-row sampling controls, built once and handed to either backend.
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
  std::vector<float> random_logits(int64_t rows, int64_t vocab, float stddev = 3.0f) {
    std::normal_distribution<float> dist(0.0f, stddev);
    std::vector<float> v(static_cast<size_t>(rows * vocab));
    for (auto& x : v) x = dist(rng_);
    return v;
  }
};

}  // namespace nanovllm::test
