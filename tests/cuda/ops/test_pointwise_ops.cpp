// embedding, rms_norm, add_rms_norm, silu_and_mul, gather_rows against the CPU backend.
// Tolerances: inputs are identical bf16 values on both sides and math is fp32 on both, so the only error is
// the GPU's final rounding to bf16 (relative 2^-9 per element, ~1.1e-3 RMS) plus, for add_rms_norm, the
// residual's rounding to bf16 before the norm: 1e-2 relative L2 leaves a wide margin while any indexing or
// formula error (O(1) relative) fails. Copies (embedding, gather) must be exact.
#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {
namespace {

constexpr double kBf16Tolerance = 1e-2;

TEST_F(CudaOpsTest, EmbeddingIsExact) {
  for (int hidden : {64, 1024}) {
    for (int tokens : {1, 3, 17, 129}) {
      // vocab_start 0: the whole table; 300: a vocabulary-parallel shard, where other ranks' ids give zeros.
      for (int64_t start : {0, 300}) {
        const int vocab = 1003;
        const auto table = random_bf16_values(rng_, int64_t{vocab} * hidden);
        std::vector<int32_t> ids(tokens);
        for (auto& id : ids) id = static_cast<int32_t>(rng_() % (vocab + start + 50));
        ids[0] = static_cast<int32_t>(start + vocab - 1);  // the last row
        Tensor out = gpu_empty(DType::BF16, {tokens, hidden});
        gpu().embedding(gpu_raw(ids, DType::I32, {tokens}), gpu_bf16(table, {vocab, hidden}), start, out);
        Tensor cpu_out = cpu_empty(DType::F32, {tokens, hidden});
        cpu().embedding(cpu_raw(ids, DType::I32, {tokens}), cpu_f32(table, {vocab, hidden}), start, cpu_out);
        EXPECT_EQ(read_gpu(out), read_cpu(cpu_out))
            << "hidden " << hidden << " tokens " << tokens << " start " << start;
      }
    }
  }
}

TEST_F(CudaOpsTest, ConcatColumnChunksIsExact) {
  for (auto [P, R, C, N] : {std::array<int64_t, 4>{2, 1, 351, 701}, {4, 33, 176, 701}, {2, 256, 75968, 151936}}) {
    std::vector<float> parts(static_cast<size_t>(P * R * C));
    for (auto& v : parts) v = static_cast<float>(rng_() % 100000) * 0.01f - 500.0f;
    Tensor out = gpu_empty(DType::F32, {R, N});
    gpu().concat_column_chunks(gpu_raw(parts, DType::F32, {P, R, C}), out);
    Tensor cpu_out = cpu_empty(DType::F32, {R, N});
    cpu().concat_column_chunks(cpu_raw(parts, DType::F32, {P, R, C}), cpu_out);
    EXPECT_EQ(read_gpu(out), read_cpu(cpu_out)) << "P " << P << " R " << R << " C " << C;
  }
}

TEST_F(CudaOpsTest, RmsNormMatchesCpu) {
  for (int hidden : {64, 1024, 2048, 5120, 8200}) {
    for (int tokens : {1, 3, 17, 129}) {
      const auto x = random_bf16_values(rng_, int64_t{tokens} * hidden, 3.0f);
      const auto w = random_bf16_values(rng_, hidden);
      Tensor out = gpu_empty(DType::BF16, {tokens, hidden});
      gpu().rms_norm(gpu_bf16(x, {tokens, hidden}), gpu_bf16(w, {hidden}), 1e-6f, out);
      Tensor cpu_out = cpu_empty(DType::F32, {tokens, hidden});
      cpu().rms_norm(cpu_f32(x, {tokens, hidden}), cpu_f32(w, {hidden}), 1e-6f, cpu_out);
      expect_rel_l2(read_gpu(out), read_cpu(cpu_out), kBf16Tolerance,
                    "rms_norm H=" + std::to_string(hidden) + " T=" + std::to_string(tokens));
    }
  }
}

TEST_F(CudaOpsTest, AddRmsNormMatchesCpuAndUpdatesResidual) {
  for (int hidden : {64, 1024, 4096}) {
    for (int tokens : {1, 3, 17, 129}) {
      for (bool in_place : {false, true}) {
        const int64_t n = int64_t{tokens} * hidden;
        const auto x = random_bf16_values(rng_, n, 2.0f);
        const auto residual = random_bf16_values(rng_, n, 4.0f);
        const auto w = random_bf16_values(rng_, hidden);
        Tensor gx = gpu_bf16(x, {tokens, hidden});
        Tensor gres = gpu_bf16(residual, {tokens, hidden});
        Tensor out = in_place ? gx : gpu_empty(DType::BF16, {tokens, hidden});
        gpu().add_rms_norm(gx, gres, gpu_bf16(w, {hidden}), 1e-6f, out);
        Tensor cres = cpu_f32(residual, {tokens, hidden});
        Tensor cpu_out = cpu_empty(DType::F32, {tokens, hidden});
        cpu().add_rms_norm(cpu_f32(x, {tokens, hidden}), cres, cpu_f32(w, {hidden}), 1e-6f, cpu_out);
        const std::string what =
            "H=" + std::to_string(hidden) + " T=" + std::to_string(tokens) + (in_place ? " in place" : "");
        expect_rel_l2(read_gpu(gres), read_cpu(cres), kBf16Tolerance, "add_rms_norm residual " + what);
        expect_rel_l2(read_gpu(out), read_cpu(cpu_out), kBf16Tolerance, "add_rms_norm out " + what);
      }
    }
  }
}

TEST_F(CudaOpsTest, SiluAndMulMatchesCpu) {
  for (int inter : {64, 3072, 136}) {
    for (int tokens : {1, 3, 17, 129}) {
      const auto gate_up = random_bf16_values(rng_, int64_t{tokens} * 2 * inter, 6.0f);
      Tensor out = gpu_empty(DType::BF16, {tokens, inter});
      gpu().silu_and_mul(gpu_bf16(gate_up, {tokens, 2 * inter}), out);
      Tensor cpu_out = cpu_empty(DType::F32, {tokens, inter});
      cpu().silu_and_mul(cpu_f32(gate_up, {tokens, 2 * inter}), cpu_out);
      expect_rel_l2(read_gpu(out), read_cpu(cpu_out), kBf16Tolerance,
                    "silu_and_mul I=" + std::to_string(inter) + " T=" + std::to_string(tokens));
    }
  }
}

TEST_F(CudaOpsTest, GatherRowsIsExact) {
  for (int hidden : {64, 1024}) {
    const int tokens = 129;
    const auto x = random_bf16_values(rng_, int64_t{tokens} * hidden);
    for (int rows : {1, 3, 17}) {
      std::vector<int32_t> idx(rows);
      for (auto& i : idx) i = static_cast<int32_t>(rng_() % tokens);
      idx.back() = tokens - 1;
      Tensor out = gpu_empty(DType::BF16, {rows, hidden});
      gpu().gather_rows(gpu_bf16(x, {tokens, hidden}), gpu_raw(idx, DType::I32, {rows}), out);
      Tensor cpu_out = cpu_empty(DType::F32, {rows, hidden});
      cpu().gather_rows(cpu_f32(x, {tokens, hidden}), cpu_raw(idx, DType::I32, {rows}), cpu_out);
      EXPECT_EQ(read_gpu(out), read_cpu(cpu_out)) << "hidden " << hidden << " rows " << rows;
      // F32 rows (e.g. logits) of an odd width take the 4-byte path.
      const int width = 1003;
      std::vector<float> xf(static_cast<size_t>(tokens) * width);
      for (auto& v : xf) v = std::uniform_real_distribution<float>(-5, 5)(rng_);
      Tensor outf = gpu_empty(DType::F32, {rows, width});
      gpu().gather_rows(gpu_raw(xf, DType::F32, {tokens, width}), gpu_raw(idx, DType::I32, {rows}), outf);
      std::vector<float> want;
      for (int32_t r : idx)
        want.insert(want.end(), xf.begin() + int64_t{r} * width, xf.begin() + int64_t{r + 1} * width);
      EXPECT_EQ(read_gpu(outf), want);
    }
  }
}

}  // namespace
}  // namespace nanovllm::test
