// Not a test: the linears above 16 rows three ways, at Qwen3-0.6B's or Qwen3-8B's projection shapes for
// M = 32..4096: (a) bf16 weights on cuBLASLt (CudaBackend::linear), (b) FP8 weights dequantised to bf16 then
// cuBLASLt's bf16 GEMM (linear_fp8, Fp8LinearPath::kDequantize), (c) FP8 weights with the activations quantised
// per token and 128-wide group then cuBLASLt's block-scaled FP8 GEMM (linear_fp8, kBlockScaled), and the
// quantiser of (c) alone. Each is 20 calls captured in a CUDA graph over rotated weight copies that exceed L2.
// A path that fell back (kBlockScaled refused) is marked "(fell back)".
//
//   bench_fp8_gemm [0.6b|8b|both]   (default both; one line per op and M: µs and TFLOP/s of each path, then the
//                                    per-layer sum qkv + o + gate_up + down)
#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "common/fp8.h"
#include "tests/cuda/ops/bench_support.h"

namespace nanovllm {
namespace {

struct Shape {
  const char* name;
  int n, k;
};

constexpr int kMs[] = {32, 64, 128, 256, 512, 1024, 2048, 4096};
constexpr int kMaxM = 4096;

double tflops(int m, const Shape& s, double us) { return 2.0 * m * s.n * s.k / (us * 1e6); }

void run_model(CudaBackend& gpu, const char* model, const std::vector<Shape>& shapes) {
  int max_k = 0, max_n = 0;
  for (const Shape& s : shapes) max_k = std::max(max_k, s.k), max_n = std::max(max_n, s.n);
  Buffer x = gpu.allocate(size_t{kMaxM} * max_k * 2);
  Buffer out = gpu.allocate(size_t{kMaxM} * max_n * 2);
  Buffer q_codes = gpu.allocate(size_t{kMaxM} * max_k);
  Buffer q_scales = gpu.allocate(size_t{kMaxM} * fp8_blocks(max_k) * 4);
  {
    std::vector<float> host(size_t{kMaxM} * max_k);
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = 0.01f * static_cast<float>(static_cast<int>(i * 2654435761u % 201) - 100);
    gpu.upload_converted(host.data(), DType::F32, x.data(), static_cast<int64_t>(host.size()));
  }
  std::printf("== %s\n%-8s %4s | %8s %6s | %8s %6s | %8s %6s %8s | %6s %6s\n", model, "op", "M", "bf16 us", "TF/s",
              "deq us", "TF/s", "fp8 us", "TF/s", "quant us", "fp8/bf", "fp8/dq");
  std::map<int, std::array<double, 3>> layer;  // per M: bf16, dequantise, block-scaled
  for (const Shape& s : shapes) {
    gpu.reserve_fp8_linear(s.n, s.k);
    const size_t bf16_bytes = size_t{2} * s.n * s.k;
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t{256} << 20) / bf16_bytes + 1));
    std::vector<Buffer> w_bf16, w_fp8, w_scale;
    const int64_t sn = fp8_blocks(s.n), sk = fp8_blocks(s.k);
    {
      std::vector<uint16_t> fill(bf16_bytes / 2, 0x3c3c);  // bf16 ~0.0115
      std::vector<uint8_t> codes(size_t{1} * s.n * s.k);
      for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 2654435761u >> 7) % 0x7e);
      std::vector<float> scales(static_cast<size_t>(sn * sk), 1e-3f);
      for (int c = 0; c < copies; ++c) {
        w_bf16.push_back(gpu.allocate(bf16_bytes));
        gpu.upload(fill.data(), w_bf16.back().data(), bf16_bytes);
        w_fp8.push_back(gpu.allocate(codes.size()));
        gpu.upload(codes.data(), w_fp8.back().data(), codes.size());
        w_scale.push_back(gpu.allocate(scales.size() * 4));
        gpu.upload(scales.data(), w_scale.back().data(), scales.size() * 4);
        gpu.prepare_fp8_linear(w_fp8.back().view(DType::F8_E4M3, {s.n, s.k}),
                               w_scale.back().view(DType::F32, {sn, sk}));
      }
    }
    for (int m : kMs) {
      const Tensor xm(x.data(), DType::BF16, {m, s.k});
      Tensor om(out.data(), DType::BF16, {m, s.n});
      const double bf16_us = test::graph_time_us(gpu, [&](int i) {
        gpu.linear(xm, w_bf16[i % copies].view(DType::BF16, {s.n, s.k}), Tensor(), om);
      });
      auto fp8_us = [&](Fp8LinearPath path, bool& took_path) {
        gpu.set_fp8_gemm_path(path);
        const double us = test::graph_time_us(gpu, [&](int i) {
          gpu.linear_fp8(xm, w_fp8[i % copies].view(DType::F8_E4M3, {s.n, s.k}),
                         w_scale[i % copies].view(DType::F32, {sn, sk}), Tensor(), om);
        });
        took_path = gpu.last_fp8_linear_path() == path;
        return us;
      };
      bool deq_ok = false, block_ok = false;
      const double deq_us = fp8_us(Fp8LinearPath::kDequantize, deq_ok);
      const double block_us = fp8_us(Fp8LinearPath::kBlockScaled, block_ok);
      const double quant_us = test::graph_time_us(gpu, [&](int) {
        cuda::launch_quantize_fp8_activations(xm.as<__nv_bfloat16>(), static_cast<uint8_t*>(q_codes.data()),
                                              static_cast<float*>(q_scales.data()), m, s.k, gpu.stream());
      });
      std::printf("%-8s %4d | %8.1f %6.0f | %8.1f %6.0f | %8.1f %6.0f %8.1f | %6.2f %6.2f%s\n", s.name, m, bf16_us,
                  tflops(m, s, bf16_us), deq_us, tflops(m, s, deq_us), block_us, tflops(m, s, block_us), quant_us,
                  block_us / bf16_us, block_us / deq_us, block_ok ? "" : "  (fell back)");
      auto& sum = layer[m];
      sum[0] += bf16_us, sum[1] += deq_us, sum[2] += block_us;
    }
  }
  std::printf("-- %s per layer (qkv + o + gate_up + down), us: M bf16 dequantise block-scaled fp8/bf16 fp8/dq\n",
              model);
  for (const auto& [m, sum] : layer)
    std::printf("layer    %4d | %8.1f %8.1f %8.1f | %6.2f %6.2f\n", m, sum[0], sum[1], sum[2], sum[2] / sum[0],
                sum[2] / sum[1]);
}

void run(const std::string& which) {
  CudaBackend gpu(0);
  BackendLimits limits = test::qwen3_0_6b_bench_limits();
  limits.max_num_tokens = kMaxM;
  gpu.reserve(limits);
  std::printf("%s\n", gpu.device_name().c_str());
  const std::vector<Shape> q06 = {
      {"qkv", 4096, 1024}, {"o", 1024, 2048}, {"gate_up", 6144, 1024}, {"down", 1024, 3072}};
  const std::vector<Shape> q8 = {
      {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 24576, 4096}, {"down", 4096, 12288}};
  if (which != "8b") run_model(gpu, "Qwen3-0.6B", q06);
  if (which != "0.6b") run_model(gpu, "Qwen3-8B", q8);
}

}  // namespace
}  // namespace nanovllm

int main(int argc, char** argv) {
  try {
    nanovllm::run(argc > 1 ? argv[1] : "both");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fp8_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
