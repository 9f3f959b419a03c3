// The skinny-linear GEMV (src/backend/cuda/gemv.cu) against the fp32 CPU backend on the same bf16 inputs:
// every token count the kernel has a code path for (T <= 8 and 9..16, one or more row groups), N that are
// not multiples of the 8-row tile (1, 17), K with a partial last 32-wide step (8, 200), Qwen3-0.6B's shapes,
// with and without bias, bf16 and fp32 outputs. Outputs are NaN-poisoned first, so an unwritten element
// fails. Tolerances as in test_linear.cpp: 1e-2 relative L2 for bf16 out, 1e-4 for fp32 out.
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {
namespace {

struct GemvShape {
  int n, k;
};

std::string describe(int t, int n, int k, bool bias, DType out) {
  return "T=" + std::to_string(t) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + (bias ? " bias" : "") +
         (out == DType::F32 ? " f32-out" : " bf16-out");
}

class GemvTest : public CudaOpsTest {
 protected:
  int sm_count() {
    int device = 0, count = 0;
    EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
    return count;
  }

  // Runs the GEMV for every token count in `token_counts` with and without bias, into bf16 and fp32
  // outputs, against the CPU's fp32 linear of the same values.
  void check_shape(int n, int k, std::initializer_list<int> token_counts) {
    const auto w = random_bf16_values(rng_, int64_t{n} * k, 0.1f);
    const auto b = random_bf16_values(rng_, n);
    const Tensor gpu_w = gpu_bf16(w, {n, k}), gpu_b = gpu_bf16(b, {n});
    const Tensor cpu_w = cpu_f32(w, {n, k}), cpu_b = cpu_f32(b, {n});
    const int sms = sm_count();
    for (int t : token_counts) {
      const auto x = random_bf16_values(rng_, int64_t{t} * k);
      const Tensor gpu_x = gpu_bf16(x, {t, k});
      for (bool bias : {false, true}) {
        Tensor want = cpu_empty(DType::F32, {t, n});
        cpu().linear(cpu_f32(x, {t, k}), cpu_w, bias ? cpu_b : Tensor(), want);
        const auto reference = read_cpu(want);
        for (DType out_dtype : {DType::BF16, DType::F32}) {
          Tensor out = gpu_empty(out_dtype, {t, n});  // NaN-poisoned
          const cuda::GemvArgs args{gpu_x.as<__nv_bfloat16>(),
                                    gpu_w.as<__nv_bfloat16>(),
                                    bias ? gpu_b.as<__nv_bfloat16>() : nullptr,
                                    out.data,
                                    out_dtype,
                                    t,
                                    n,
                                    k};
          ASSERT_TRUE(cuda::gemv_supports(args)) << describe(t, n, k, bias, out_dtype);
          cuda::launch_gemv(args, sms, gpu().stream());
          expect_rel_l2(read_gpu(out), reference, out_dtype == DType::F32 ? 1e-4 : 1e-2,
                        describe(t, n, k, bias, out_dtype));
          if (HasFailure()) return;
        }
      }
    }
  }
};

class GemvShapeTest : public GemvTest, public ::testing::WithParamInterface<GemvShape> {};

TEST_P(GemvShapeTest, MatchesCpu) {
  const GemvShape s = GetParam();
  check_shape(s.n, s.k, {1, 2, 3, 7, 8, 9, 15, 16});
}

std::vector<GemvShape> gemv_shapes() {
  std::vector<GemvShape> shapes;
  for (int n : {1, 17, 1024, 4096, 6144}) {
    for (int k : {64, 1024, 2048, 3072}) shapes.push_back({n, k});
  }
  // K whose last 32-wide step is partial, and N that is neither a multiple of 8 nor of a 32-row CTA.
  for (int n : {1, 17, 1000}) {
    for (int k : {8, 200}) shapes.push_back({n, k});
  }
  shapes.push_back({4100, 1032});  // 4 row groups per warp (T >= 9), last CTA partly past N
  shapes.push_back({9000, 1032});  // 2 and 4 row groups in grids of 2+ waves: warps capped, CTAs share SMs
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvShapeTest, ::testing::ValuesIn(gemv_shapes()),
                         [](const ::testing::TestParamInfo<GemvShape>& info) {
                           return "N" + std::to_string(info.param.n) + "_K" + std::to_string(info.param.k);
                         });

// The lm_head of Qwen3-0.6B at decode: 151936 rows, fp32 logits.
TEST_F(GemvTest, LmHeadDecode) { check_shape(151936, 1024, {1}); }

// Gemm::run routes small M to the GEMV; its result agrees with cuBLASLt's on the same inputs, every call
// gives the same bits, and a captured launch replays correctly.
TEST_F(GemvTest, GemmRoutesSmallMAndAgreesWithCublasLt) {
  const int n = 1024, k = 2048;
  Tensor workspace = gpu_empty(DType::BF16, {16 << 20}, false);  // 32 MiB
  cuda::Gemm gemm(workspace.data, workspace.bytes());
  const auto w = random_bf16_values(rng_, int64_t{n} * k, 0.1f);
  const auto b = random_bf16_values(rng_, n);
  const Tensor gpu_w = gpu_bf16(w, {n, k}), gpu_b = gpu_bf16(b, {n});
  for (int t : {1, 5, cuda::kGemvMaxTokens}) {
    const auto x = random_bf16_values(rng_, int64_t{t} * k);
    const Tensor gpu_x = gpu_bf16(x, {t, k});
    Tensor via_run = gpu_empty(DType::BF16, {t, n}), via_cublas = gpu_empty(DType::BF16, {t, n});
    const auto* xp = gpu_x.as<__nv_bfloat16>();
    const auto* wp = gpu_w.as<__nv_bfloat16>();
    const auto* bp = gpu_b.as<__nv_bfloat16>();
    gemm.run(xp, wp, bp, via_run.data, DType::BF16, t, n, k, gpu().stream());
    gemm.run_cublaslt(xp, wp, bp, via_cublas.data, DType::BF16, t, n, k, gpu().stream());
    const auto first = read_gpu(via_run);
    expect_rel_l2(first, read_gpu(via_cublas), 1e-2, "gemv vs cuBLASLt T=" + std::to_string(t));

    gemm.run(xp, wp, bp, via_run.data, DType::BF16, t, n, k, gpu().stream());
    EXPECT_EQ(read_gpu(via_run), first) << "T=" << t << ": not deterministic";

    Tensor captured = gpu_empty(DType::BF16, {t, n});
    CudaGraph graph = gpu().capture([&] { gemm.run(xp, wp, bp, captured.data, DType::BF16, t, n, k, gpu().stream()); });
    gpu().replay(graph);
    gpu().synchronize();
    EXPECT_EQ(read_gpu(captured), first) << "T=" << t << ": graph replay differs";
  }
}

// Under programmatic dependent launch (on by default on sm_90) a GEMV reads x only after the previous kernel
// is done: chain y = x W1^T, z = y W2^T, eagerly and as a replayed graph (y is re-poisoned before each run, so
// reading it early gives NaN or stale values).
TEST_F(GemvTest, OverlappedLaunchReadsThePreviousKernelsOutput) {
  const int t = 3, k1 = 1024, n1 = 3072, n2 = 1024;
  const auto x = random_bf16_values(rng_, int64_t{t} * k1);
  const auto w1 = random_bf16_values(rng_, int64_t{n1} * k1, 0.1f);
  const auto w2 = random_bf16_values(rng_, int64_t{n2} * n1, 0.1f);
  const Tensor gx = gpu_bf16(x, {t, k1}), gw1 = gpu_bf16(w1, {n1, k1}), gw2 = gpu_bf16(w2, {n2, n1});
  Tensor y = gpu_empty(DType::BF16, {t, n1});
  Tensor z = gpu_empty(DType::F32, {t, n2});
  const int sms = sm_count();
  auto chain = [&] {
    cuda::launch_gemv({gx.as<__nv_bfloat16>(), gw1.as<__nv_bfloat16>(), nullptr, y.data, DType::BF16, t, n1, k1}, sms,
                      gpu().stream());
    cuda::launch_gemv({y.as<__nv_bfloat16>(), gw2.as<__nv_bfloat16>(), nullptr, z.data, DType::F32, t, n2, n1}, sms,
                      gpu().stream());
  };
  const std::vector<unsigned char> poison_y(y.bytes(), 0xFF), poison_z(z.bytes(), 0xFF);
  chain();
  const auto y_values = read_gpu(y);
  Tensor want = cpu_empty(DType::F32, {t, n2});
  cpu().linear(cpu_f32(y_values, {t, n1}), cpu_f32(w2, {n2, n1}), Tensor(), want);
  const auto reference = read_cpu(want);
  expect_rel_l2(read_gpu(z), reference, 1e-4, "overlapped GEMV, eager");
  CudaGraph graph = gpu().capture(chain);
  for (int replay = 0; replay < 20 && !HasFailure(); ++replay) {
    gpu().upload(poison_y.data(), y.data, y.bytes());
    gpu().upload(poison_z.data(), z.data, z.bytes());
    gpu().replay(graph);
    expect_rel_l2(read_gpu(z), reference, 1e-4, "overlapped GEMV, graph replay " + std::to_string(replay));
  }
}

// Through CudaBackend::linear (the path the model runner takes) at a decode batch.
TEST_F(GemvTest, BackendLinearAtDecodeBatch) {
  const int t = 4, n = 4096, k = 1024;
  const auto x = random_bf16_values(rng_, int64_t{t} * k);
  const auto w = random_bf16_values(rng_, int64_t{n} * k, 0.1f);
  Tensor out = gpu_empty(DType::BF16, {t, n});
  gpu().linear(gpu_bf16(x, {t, k}), gpu_bf16(w, {n, k}), Tensor(), out);
  Tensor want = cpu_empty(DType::F32, {t, n});
  cpu().linear(cpu_f32(x, {t, k}), cpu_f32(w, {n, k}), Tensor(), want);
  expect_rel_l2(read_gpu(out), read_cpu(want), 1e-2, "linear T=4 qkv");
}

// Which calls the GEMV takes (host logic only: the pointers are never dereferenced).
TEST(GemvSupports, Limits) {
  const auto* aligned = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{4096});
  const auto* misaligned = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{4096 + 8});
  void* out = reinterpret_cast<void*>(uintptr_t{8192});
  const cuda::GemvArgs ok{aligned, aligned, nullptr, out, DType::BF16, 1, 17, 64};
  EXPECT_TRUE(cuda::gemv_supports(ok));
  auto with = [&](auto change) {
    cuda::GemvArgs a = ok;
    change(a);
    return cuda::gemv_supports(a);
  };
  EXPECT_TRUE(with([](cuda::GemvArgs& a) { a.tokens = cuda::kGemvMaxTokens; }));
  EXPECT_FALSE(with([](cuda::GemvArgs& a) { a.tokens = cuda::kGemvMaxTokens + 1; }));
  EXPECT_FALSE(with([](cuda::GemvArgs& a) { a.tokens = 0; }));
  EXPECT_FALSE(with([](cuda::GemvArgs& a) { a.k = 60; }));
  EXPECT_FALSE(with([](cuda::GemvArgs& a) { a.n = 0; }));
  EXPECT_FALSE(with([&](cuda::GemvArgs& a) { a.x = misaligned; }));
  EXPECT_FALSE(with([&](cuda::GemvArgs& a) { a.weight = misaligned; }));
  EXPECT_FALSE(with([](cuda::GemvArgs& a) { a.out_dtype = DType::I32; }));
  EXPECT_TRUE(with([](cuda::GemvArgs& a) { a.out_dtype = DType::F32; }));
  EXPECT_THROW(cuda::launch_gemv(cuda::GemvArgs{}, 132, nullptr), InvalidInput);
}

}  // namespace
}  // namespace nanovllm::test
