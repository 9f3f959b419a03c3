// linear_fp8 (block-scaled FP8 weights) against the CPU backend's, which multiplies the exact dequantised
// weights in fp32. Up to 16 rows the GEMV reads the codes (exact in bf16) and scales each step's product in
// fp32: only summation order and the output rounding differ (fp32 out within 1e-4 relative L2, bf16 1e-2).
// Above 16 rows the weight is dequantised to bf16 first (a rounding of ~2^-9 per weight) for cuBLASLt:
// 1e-2 for both outputs. Shapes: Qwen3-0.6B's, N and K not multiples of 128 (partial scale blocks), an odd N.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {
namespace {

struct Fp8LinearCase {
  const char* name;
  int m, n, k;
  bool bias;
  DType out;
};

class LinearFp8Test : public CudaOpsTest, public ::testing::WithParamInterface<Fp8LinearCase> {};

TEST_P(LinearFp8Test, MatchesCpu) {
  const Fp8LinearCase c = GetParam();
  const int64_t sn = (c.n + 127) / 128, sk = (c.k + 127) / 128;
  const auto x = random_bf16_values(rng_, int64_t{c.m} * c.k);
  const auto codes = random_fp8_codes(rng_, int64_t{c.n} * c.k);
  const auto scales = random_fp8_scales(rng_, sn * sk);
  const auto b = random_bf16_values(rng_, c.n);
  gpu().reserve_fp8_linear(c.n, c.k);
  gpu().set_fp8_gemm_path(Fp8LinearPath::kDequantize);  // the block-scaled path: test_fp8_block_gemm.cpp
  Tensor out = gpu_empty(c.out, {c.m, c.n});
  const auto run_gpu = [&] {
    gpu().linear_fp8(gpu_bf16(x, {c.m, c.k}), gpu_raw(codes, DType::F8_E4M3, {c.n, c.k}),
                     gpu_raw(scales, DType::F32, {sn, sk}), c.bias ? gpu_bf16(b, {c.n}) : Tensor(), out);
    return read_gpu(out);
  };
  const auto first = run_gpu();
  Tensor cpu_out = cpu_empty(DType::F32, {c.m, c.n});
  cpu().linear_fp8(cpu_f32(x, {c.m, c.k}), cpu_raw(codes, DType::F8_E4M3, {c.n, c.k}),
                   cpu_raw(scales, DType::F32, {sn, sk}), c.bias ? cpu_f32(b, {c.n}) : Tensor(), cpu_out);
  const double tolerance = c.m <= 16 && c.out == DType::F32 ? 1e-4 : 1e-2;
  expect_rel_l2(first, read_cpu(cpu_out), tolerance, c.name);
  EXPECT_EQ(run_gpu(), first) << c.name << ": not deterministic";
}

std::vector<Fp8LinearCase> fp8_linear_cases() {
  std::vector<Fp8LinearCase> cases;
  struct Shape {
    const char* name;
    int n, k;
  };
  // many_rounds: a grid of over two waves at T <= 2 (the GEMV's small CTAs, k over three rounds of warps), its k
  // ending inside a scale block. capped_groups: the same with 2 and 4 row groups (T = 5, 16), k inside a block.
  const Shape shapes[] = {{"qkv", 4096, 1024},
                          {"down", 1024, 3072},
                          {"partial_blocks", 200, 304},
                          {"many_rounds", 2304, 4880},
                          {"capped_groups", 8704, 2064}};
  for (const Shape& s : shapes) {
    for (int m : {1, 5, 16, 17, 129}) cases.push_back({s.name, m, s.n, s.k, false, DType::BF16});
  }
  // large_weight: over the GEMV's integer-codes bound (32 M elements), where it converts codes by instruction.
  for (int m : {1, 9}) cases.push_back({"large_weight", m, 8192, 4112, false, DType::BF16});
  for (int m : {1, 9, 33}) cases.push_back({"bias", m, 384, 256, true, DType::BF16});
  for (int m : {1, 16, 40}) cases.push_back({"f32_odd_n", m, 701, 144, false, DType::F32});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearFp8Test, ::testing::ValuesIn(fp8_linear_cases()),
                         [](const ::testing::TestParamInfo<Fp8LinearCase>& info) {
                           return std::string(info.param.name) + "_M" + std::to_string(info.param.m);
                         });

// The GEMV reads small weights' codes as bf16 values 2^-120 times theirs (E4M3 subnormals become bf16 subnormals):
// weights that are all subnormal codes (exponent field 0, both signs) must come out as the CPU's exact products,
// not flushed.
TEST_F(CudaOpsTest, LinearFp8KeepsSubnormalCodes) {
  const int n = 256, k = 512;
  for (const int m : {1, 5, 16}) {
    const auto x = random_bf16_values(rng_, int64_t{m} * k);
    auto codes = random_fp8_codes(rng_, int64_t{n} * k);
    for (auto& c : codes) c &= 0x87;  // sign and mantissa: values m * 2^-9
    const auto scales = random_fp8_scales(rng_, (n / 128) * (k / 128));
    Tensor out = gpu_empty(DType::F32, {m, n});
    gpu().linear_fp8(gpu_bf16(x, {m, k}), gpu_raw(codes, DType::F8_E4M3, {n, k}),
                     gpu_raw(scales, DType::F32, {n / 128, k / 128}), Tensor(), out);
    Tensor cpu_out = cpu_empty(DType::F32, {m, n});
    cpu().linear_fp8(cpu_f32(x, {m, k}), cpu_raw(codes, DType::F8_E4M3, {n, k}),
                     cpu_raw(scales, DType::F32, {n / 128, k / 128}), Tensor(), cpu_out);
    expect_rel_l2(read_gpu(out), read_cpu(cpu_out), 1e-4, "subnormal codes, M=" + std::to_string(m));
  }
}

// Above 16 rows the dequantised copy needs the scratch reserve_fp8_linear sizes; a weight never reserved is an
// error, not a write past the scratch.
TEST_F(CudaOpsTest, LinearFp8RefusesAnUnreservedWeight) {
  const int m = 32, n = 4096, k = 4096;
  const auto x = random_bf16_values(rng_, int64_t{m} * k);
  Tensor out = gpu_empty(DType::BF16, {m, n});
  EXPECT_THROW(gpu().linear_fp8(gpu_bf16(x, {m, k}), gpu_empty(DType::F8_E4M3, {n, k}, false),
                                gpu_empty(DType::F32, {n / 128, k / 128}, false), Tensor(), out),
               EngineError);
}

// The FP8 settings read from the environment refuse a value they do not know, naming the variable, the value and
// the choices.
TEST_F(CudaOpsTest, Fp8SettingsNameABadEnvironmentValue) {
  for (const char* name : {"NANOVLLM_FP8_GEMM", "NANOVLLM_FP8_ATTENTION"}) {
    setenv(name, "fastest", 1);
    try {
      CudaBackend backend(0);
      ADD_FAILURE() << name << "=fastest was accepted";
    } catch (const InvalidInput& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(name), std::string::npos) << what;
      EXPECT_NE(what.find("'fastest'"), std::string::npos) << what;
      EXPECT_NE(what.find(" or '"), std::string::npos) << what;
    }
    unsetenv(name);
  }
}

}  // namespace
}  // namespace nanovllm::test
