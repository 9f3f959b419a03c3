// paged_attention through CudaBackend (decode -> split-KV kernel with the reserved workspace, a mixed step's
// decode rows -> the same, otherwise the prefill kernel) against the CPU backend. The kernels themselves are tested in
// depth by tests/cuda/attention; this checks the plumbing. Tolerance 2e-2 relative L2: bf16 q/K/V on both sides, the
// GPU rounds the probabilities to bf16 for the tensor-core P·V product and the output to bf16.
#include <algorithm>
#include <numeric>

#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {
namespace {

struct AttentionCase {
  std::vector<int> q_lens;
  std::vector<int> k_lens;
  int num_heads, num_kv_heads, head_dim, block_size;
  int num_decode_rows = 0;  // a mixed step's leading decode rows
};

class AttentionDispatchTest : public CudaOpsTest {
 protected:
  Tensor gpu_raw_i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> d) {
    return gpu_raw(v, DType::I32, d);
  }
  Tensor cpu_raw_i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> d) {
    return cpu_raw(v, DType::I32, d);
  }

  void run(const AttentionCase& c) {
    const int num_seqs = static_cast<int>(c.q_lens.size());
    const int nh = c.num_heads, nkv = c.num_kv_heads, d = c.head_dim, bs = c.block_size;
    const int max_k = *std::max_element(c.k_lens.begin(), c.k_lens.end());
    const int max_q = *std::max_element(c.q_lens.begin(), c.q_lens.end());
    const int max_blocks = (max_k + bs - 1) / bs + 1;
    const int num_blocks = num_seqs * max_blocks + 3;
    std::vector<int32_t> cu_q(num_seqs + 1, 0), k_lens(c.k_lens.begin(), c.k_lens.end());
    for (int s = 0; s < num_seqs; ++s) cu_q[s + 1] = cu_q[s] + c.q_lens[s];
    const int tokens = cu_q.back();
    std::vector<int32_t> free_blocks(num_blocks);
    std::iota(free_blocks.begin(), free_blocks.end(), 0);
    std::shuffle(free_blocks.begin(), free_blocks.end(), rng_);
    std::vector<int32_t> tables(static_cast<size_t>(num_seqs) * max_blocks, -1);
    size_t next = 0;
    for (int s = 0; s < num_seqs; ++s) {
      for (int b = 0; b < (c.k_lens[s] + bs - 1) / bs; ++b) tables[s * max_blocks + b] = free_blocks[next++];
    }
    const auto q = random_bf16_values(rng_, int64_t{tokens} * nh * d, 2.0f);
    const auto k = random_bf16_values(rng_, int64_t{num_blocks} * bs * nkv * d, 2.0f);
    const auto v = random_bf16_values(rng_, int64_t{num_blocks} * bs * nkv * d);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const bool decode = max_q == 1 && std::all_of(c.q_lens.begin(), c.q_lens.end(), [](int x) { return x == 1; });

    // The same batch on each side; make_i32 puts an int32 vector where that side's kernels read it.
    const auto batch = [&](const auto& make_i32) {
      AttentionBatch b{make_i32(cu_q, {num_seqs + 1}), make_i32(k_lens, {num_seqs}),
                       make_i32(tables, {num_seqs, max_blocks})};
      b.num_seqs = num_seqs;
      b.max_seqlen_q = max_q;
      b.max_seqlen_k = max_k;
      b.max_blocks_per_seq = max_blocks;
      b.block_size = bs;
      b.decode_only = decode;
      b.num_decode_rows = c.num_decode_rows;
      return b;
    };
    using Dims = std::initializer_list<int64_t>;
    const AttentionBatch gb = batch([&](const std::vector<int32_t>& v, Dims dims) { return gpu_raw_i32(v, dims); });
    KvCacheLayer gcache{gpu_bf16(k, {num_blocks, bs, nkv, d}), gpu_bf16(v, {num_blocks, bs, nkv, d})};
    Tensor gout = gpu_empty(DType::BF16, {tokens, nh * d});
    gpu().paged_attention(gpu_bf16(q, {tokens, nh * d}), gcache, gb, nh, nkv, d, scale, gout);

    const AttentionBatch cb = batch([&](const std::vector<int32_t>& v, Dims dims) { return cpu_raw_i32(v, dims); });
    KvCacheLayer ccache{cpu_f32(k, {num_blocks, bs, nkv, d}), cpu_f32(v, {num_blocks, bs, nkv, d})};
    Tensor cout_ = cpu_empty(DType::F32, {tokens, nh * d});
    cpu().paged_attention(cpu_f32(q, {tokens, nh * d}), ccache, cb, nh, nkv, d, scale, cout_);
    expect_rel_l2(read_gpu(gout), read_cpu(cout_), 2e-2,
                  decode                  ? "decode"
                  : c.num_decode_rows > 0 ? "mixed"
                                          : "prefill");
  }
};

TEST_F(AttentionDispatchTest, DecodeMatchesCpu) {
  run({{1, 1, 1}, {1, 100, 257}, 16, 8, 128, 16});
  run({{1, 1}, {33, 700}, 8, 2, 64, 64});
}

TEST_F(AttentionDispatchTest, PrefillMatchesCpu) {
  run({{5, 10, 1}, {5, 33, 70}, 16, 8, 128, 16});  // fresh prefill, a chunk after a prefix, one decode row
  run({{129}, {129}, 8, 8, 64, 256});
}

// A mixed step: decode rows first (one through the split path: 700 keys), then a fresh prompt and a chunk after a
// prefix; the decode rows go to the decode kernel, the rest to the prefill kernel, writing one output.
TEST_F(AttentionDispatchTest, MixedStepMatchesCpu) {
  run({{1, 1, 1, 17, 40}, {1, 700, 257, 17, 95}, 16, 8, 128, 16, 3});
  run({{1, 64}, {33, 64}, 8, 2, 64, 64, 1});
}

// A model the attention kernels cannot run is refused when the backend is set up (at load), naming the shape.
TEST(AttentionHeads, UnsupportedModelIsRefusedAtReserve) {
  if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  CudaBackend gpu(0);
  BackendLimits limits;
  limits.max_num_tokens = 256;
  limits.max_num_seqs = 8;
  limits.max_model_len = 256;
  limits.num_heads = 4;
  limits.num_kv_heads = 2;
  limits.head_dim = 32;
  try {
    gpu.reserve(limits);
    ADD_FAILURE() << "head_dim 32 was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run this model: head_dim 32"), std::string::npos) << e.what();
  }
  limits.head_dim = 64;
  EXPECT_NO_THROW(gpu.reserve(limits));
}

}  // namespace
}  // namespace nanovllm::test
