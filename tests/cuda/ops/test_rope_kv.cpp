// qk_norm_rope_cache against the CPU backend: q output and the whole K/V cache (so slots marked -1, and
// every slot nobody wrote, must keep their previous contents). Tolerance as for the other bf16 outputs
// (1e-2 relative L2): the only differences are fp32 summation order in the norm and the bf16 rounding of
// the outputs; V is a copy and must match exactly.
#include <algorithm>
#include <numeric>

#include "tests/cuda/ops/ops_test_support.h"

namespace nanovllm::test {
namespace {

std::vector<float> rope_table(int max_pos, int d, double theta) {
  std::vector<float> table(static_cast<size_t>(max_pos) * d);
  for (int p = 0; p < max_pos; ++p) {
    for (int i = 0; i < d / 2; ++i) {
      const double freq = std::pow(theta, -2.0 * i / d);
      table[static_cast<size_t>(p) * d + i] = static_cast<float>(std::cos(p * freq));
      table[static_cast<size_t>(p) * d + d / 2 + i] = static_cast<float>(std::sin(p * freq));
    }
  }
  return table;
}

struct RopeCase {
  int tokens, num_heads, num_kv_heads, head_dim, block_size;
  bool qk_norm;
};

class RopeKvTest : public CudaOpsTest, public ::testing::WithParamInterface<RopeCase> {};

TEST_P(RopeKvTest, MatchesCpu) {
  const RopeCase c = GetParam();
  const int t = c.tokens, nh = c.num_heads, nkv = c.num_kv_heads, d = c.head_dim;
  const int max_pos = 4096, num_blocks = 2 + (t + c.block_size - 1) / c.block_size;
  const int64_t slots = int64_t{num_blocks} * c.block_size;
  const int64_t qkv_width = int64_t{nh + 2 * nkv} * d;

  const auto qkv = random_bf16_values(rng_, t * qkv_width, 4.0f);
  const auto q_norm = random_bf16_values(rng_, d, 1.5f);
  const auto k_norm = random_bf16_values(rng_, d, 1.5f);
  const auto rope = rope_table(max_pos, d, 1e6);
  std::vector<int32_t> positions(t), slot_mapping(t);
  for (auto& p : positions) p = static_cast<int32_t>(rng_() % max_pos);
  positions[0] = max_pos - 1;
  std::vector<int32_t> all_slots(static_cast<size_t>(slots));
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng_);
  for (int i = 0; i < t; ++i) slot_mapping[i] = (i % 5 == 2) ? -1 : all_slots[i];  // some tokens skip the cache
  // The caches start with random contents that untouched slots must keep.
  const auto k_init = random_bf16_values(rng_, slots * nkv * d);
  const auto v_init = random_bf16_values(rng_, slots * nkv * d);

  KvCacheLayer gcache{gpu_bf16(k_init, {num_blocks, c.block_size, nkv, d}),
                      gpu_bf16(v_init, {num_blocks, c.block_size, nkv, d})};
  Tensor gq = gpu_empty(DType::BF16, {t, nh * d});
  gpu().qk_norm_rope_cache(gpu_bf16(qkv, {t, qkv_width}), c.qk_norm ? gpu_bf16(q_norm, {d}) : Tensor(),
                           c.qk_norm ? gpu_bf16(k_norm, {d}) : Tensor(), 1e-6f, gpu_raw(positions, DType::I32, {t}),
                           gpu_raw(rope, DType::F32, {max_pos, d}), gpu_raw(slot_mapping, DType::I32, {t}), nh, nkv, d,
                           gcache, gq);

  KvCacheLayer ccache{cpu_f32(k_init, {num_blocks, c.block_size, nkv, d}),
                      cpu_f32(v_init, {num_blocks, c.block_size, nkv, d})};
  Tensor cq = cpu_empty(DType::F32, {t, nh * d});
  cpu().qk_norm_rope_cache(cpu_f32(qkv, {t, qkv_width}), c.qk_norm ? cpu_f32(q_norm, {d}) : Tensor(),
                           c.qk_norm ? cpu_f32(k_norm, {d}) : Tensor(), 1e-6f, cpu_raw(positions, DType::I32, {t}),
                           cpu_f32(rope, {max_pos, d}), cpu_raw(slot_mapping, DType::I32, {t}), nh, nkv, d, ccache, cq);

  expect_rel_l2(read_gpu(gq), read_cpu(cq), 1e-2, "q");
  expect_rel_l2(read_gpu(gcache.k), read_cpu(ccache.k), 1e-2, "k cache");
  EXPECT_EQ(read_gpu(gcache.v), read_cpu(ccache.v)) << "v cache";
  // Slots of skipped tokens and never-mapped slots are untouched, bit for bit.
  const auto gk = read_gpu(gcache.k);
  std::vector<bool> written(static_cast<size_t>(slots), false);
  for (int32_t s : slot_mapping) {
    if (s >= 0) written[static_cast<size_t>(s)] = true;
  }
  for (int64_t s = 0; s < slots; ++s) {
    if (written[static_cast<size_t>(s)]) continue;
    for (int64_t j = 0; j < int64_t{nkv} * d; ++j) {
      ASSERT_EQ(gk[s * nkv * d + j], k_init[s * nkv * d + j]) << "slot " << s << " was written";
    }
  }
}

std::vector<RopeCase> rope_cases() {
  std::vector<RopeCase> cases;
  const int block_sizes[] = {16, 32, 64, 128, 256};
  int b = 0;
  for (int d : {64, 128}) {
    for (int group : {1, 2, 4, 8}) {
      for (int tokens : {1, 3, 17, 129}) {
        cases.push_back({tokens, 2 * group, 2, d, block_sizes[b++ % 5], true});
      }
    }
  }
  cases.push_back({17, 16, 8, 128, 16, false});   // Qwen2: no q/k norm
  cases.push_back({129, 16, 8, 128, 256, true});  // Qwen3-0.6B heads
  cases.push_back({5, 8, 1, 256, 32, true});      // head_dim 256
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeKvTest, ::testing::ValuesIn(rope_cases()),
                         [](const ::testing::TestParamInfo<RopeCase>& info) {
                           const RopeCase& c = info.param;
                           return "T" + std::to_string(c.tokens) + "_nh" + std::to_string(c.num_heads) + "_nkv" +
                                  std::to_string(c.num_kv_heads) + "_d" + std::to_string(c.head_dim) + "_bs" +
                                  std::to_string(c.block_size) + (c.qk_norm ? "_norm" : "_nonorm");
                         });

}  // namespace
}  // namespace nanovllm::test
