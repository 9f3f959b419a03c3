// linear (cuBLASLt) against the CPU backend at Qwen3-0.6B's shapes and odd M. Both sides multiply the same
// bf16 values with fp32 accumulation, so only the summation order differs (~1e-6 relative) before the
// output rounding: bf16 outputs are held to 1e-2 relative L2 (their rounding alone is ~1e-3), fp32 outputs
// (the lm_head's logits) to 1e-4.
#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {
namespace {

struct LinearCase {
  const char* name;
  int m, n, k;
  bool bias;
  DType out;
};

class LinearTest : public CudaOpsTest, public ::testing::WithParamInterface<LinearCase> {};

TEST_P(LinearTest, MatchesCpu) {
  const LinearCase c = GetParam();
  const auto x = random_bf16_values(rng_, int64_t{c.m} * c.k);
  const auto w = random_bf16_values(rng_, int64_t{c.n} * c.k, 0.1f);
  const auto b = random_bf16_values(rng_, c.n);
  Tensor out = gpu_empty(c.out, {c.m, c.n});
  gpu().linear(gpu_bf16(x, {c.m, c.k}), gpu_bf16(w, {c.n, c.k}), c.bias ? gpu_bf16(b, {c.n}) : Tensor(), out);
  Tensor cpu_out = cpu_empty(DType::F32, {c.m, c.n});
  cpu().linear(cpu_f32(x, {c.m, c.k}), cpu_f32(w, {c.n, c.k}), c.bias ? cpu_f32(b, {c.n}) : Tensor(), cpu_out);
  expect_rel_l2(read_gpu(out), read_cpu(cpu_out), c.out == DType::F32 ? 1e-4 : 1e-2, c.name);
  // A second call of the same shape reuses the cached plan and must give the same bits.
  const auto first = read_gpu(out);
  gpu().linear(gpu_bf16(x, {c.m, c.k}), gpu_bf16(w, {c.n, c.k}), c.bias ? gpu_bf16(b, {c.n}) : Tensor(), out);
  EXPECT_EQ(read_gpu(out), first) << c.name << ": not deterministic";
}

std::vector<LinearCase> linear_cases() {
  std::vector<LinearCase> cases;
  struct Shape {
    const char* name;
    int n, k;
  };
  // Qwen3-0.6B: hidden 1024, 16 q heads + 8 kv heads of 128, intermediate 3072.
  const Shape shapes[] = {{"qkv", 4096, 1024}, {"o_proj", 1024, 2048}, {"gate_up", 6144, 1024}, {"down", 1024, 3072}};
  for (const Shape& s : shapes) {
    for (int m : {1, 3, 17, 129, 300}) cases.push_back({s.name, m, s.n, s.k, false, DType::BF16});
  }
  for (int m : {1, 3, 17, 129}) cases.push_back({"qkv_bias", m, 4096, 1024, true, DType::BF16});  // Qwen2 style
  for (int m : {1, 17}) cases.push_back({"lm_head", m, 151936, 1024, false, DType::F32});
  cases.push_back({"f32_bias", 5, 264, 1024, true, DType::F32});
  cases.push_back({"small", 2, 8, 8, true, DType::BF16});
  // An odd vocabulary (the untied golden model's 701): output rows only 2- or 4-byte aligned, through the
  // GEMV (M <= 16) and through cuBLASLt (M > 16).
  for (int m : {1, 17, 64}) cases.push_back({"odd_vocab", m, 701, 96, false, DType::F32});
  cases.push_back({"odd_n_bf16", 33, 701, 96, false, DType::BF16});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Qwen3Shapes, LinearTest, ::testing::ValuesIn(linear_cases()),
                         [](const ::testing::TestParamInfo<LinearCase>& info) {
                           return std::string(info.param.name) + "_M" + std::to_string(info.param.m);
                         });

// tune_linear on a weight of the lm_head's size: whichever kernel it keeps for each row count (the GEMV or
// cuBLASLt, by timing), linear's results at 1-16 rows stay within the lm_head's bound against the CPU.
TEST_F(CudaOpsTest, TunedLinearMatchesCpuAtEveryRowCount) {
  const int n = 151936, k = 1024;
  const auto w = random_bf16_values(rng_, int64_t{n} * k, 0.1f);
  const Tensor gw = gpu_bf16(w, {n, k});
  gpu().tune_linear(gw, DType::F32);
  const Tensor cw = cpu_f32(w, {n, k});
  for (int m : {1, 2, 3, 8, 11, 16}) {
    const auto x = random_bf16_values(rng_, int64_t{m} * k);
    Tensor out = gpu_empty(DType::F32, {m, n});
    gpu().linear(gpu_bf16(x, {m, k}), gw, Tensor(), out);
    Tensor cpu_out = cpu_empty(DType::F32, {m, n});
    cpu().linear(cpu_f32(x, {m, k}), cw, Tensor(), cpu_out);
    expect_rel_l2(read_gpu(out), read_cpu(cpu_out), 1e-4, "tuned lm_head M=" + std::to_string(m));
  }
  EXPECT_THROW(gpu().tune_linear(gpu_empty(DType::F32, {4, 8}), DType::F32), EngineError);
}

}  // namespace
}  // namespace nanovllm::test
