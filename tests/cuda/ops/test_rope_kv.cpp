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

// One case's random inputs: qkv, norms, the rope table, positions and a shuffled slot mapping in which some
// tokens skip the cache.
struct RopeInputs {
  int max_pos = 4096, num_blocks = 0;
  int64_t slots = 0, qkv_width = 0;
  std::vector<float> qkv, q_norm, k_norm, rope;
  std::vector<int32_t> positions, slot_mapping;

  RopeInputs(const RopeCase& c, std::mt19937& rng) {
    const int t = c.tokens, d = c.head_dim;
    num_blocks = 2 + (t + c.block_size - 1) / c.block_size;
    slots = int64_t{num_blocks} * c.block_size;
    qkv_width = int64_t{c.num_heads + 2 * c.num_kv_heads} * d;
    qkv = random_bf16_values(rng, t * qkv_width, 4.0f);
    q_norm = random_bf16_values(rng, d, 1.5f);
    k_norm = random_bf16_values(rng, d, 1.5f);
    rope = rope_table(max_pos, d, 1e6);
    positions.resize(t);
    slot_mapping.resize(t);
    for (auto& p : positions) p = static_cast<int32_t>(rng() % max_pos);
    positions[0] = max_pos - 1;
    std::vector<int32_t> all_slots(static_cast<size_t>(slots));
    std::iota(all_slots.begin(), all_slots.end(), 0);
    std::shuffle(all_slots.begin(), all_slots.end(), rng);
    for (int i = 0; i < t; ++i) slot_mapping[i] = (i % 5 == 2) ? -1 : all_slots[i];
  }
  std::vector<bool> written_slots() const {
    std::vector<bool> written(static_cast<size_t>(slots), false);
    for (int32_t s : slot_mapping)
      if (s >= 0) written[static_cast<size_t>(s)] = true;
    return written;
  }
};

class RopeKvTest : public CudaOpsTest, public ::testing::WithParamInterface<RopeCase> {
 protected:
  // The op on the GPU (bf16 inputs) and on the CPU (the same values in f32), into the given caches; returns q.
  std::vector<float> run_gpu(const RopeCase& c, const RopeInputs& in, KvCacheLayer& cache) {
    const int t = c.tokens, d = c.head_dim;
    Tensor q = gpu_empty(DType::BF16, {t, c.num_heads * d});
    gpu().qk_norm_rope_cache(gpu_bf16(in.qkv, {t, in.qkv_width}), c.qk_norm ? gpu_bf16(in.q_norm, {d}) : Tensor(),
                             c.qk_norm ? gpu_bf16(in.k_norm, {d}) : Tensor(), 1e-6f,
                             gpu_raw(in.positions, DType::I32, {t}), gpu_raw(in.rope, DType::F32, {in.max_pos, d}),
                             gpu_raw(in.slot_mapping, DType::I32, {t}), c.num_heads, c.num_kv_heads, d, cache, q);
    return read_gpu(q);
  }
  std::vector<float> run_cpu(const RopeCase& c, const RopeInputs& in, KvCacheLayer& cache) {
    const int t = c.tokens, d = c.head_dim;
    Tensor q = cpu_empty(DType::F32, {t, c.num_heads * d});
    cpu().qk_norm_rope_cache(cpu_f32(in.qkv, {t, in.qkv_width}), c.qk_norm ? cpu_f32(in.q_norm, {d}) : Tensor(),
                             c.qk_norm ? cpu_f32(in.k_norm, {d}) : Tensor(), 1e-6f,
                             cpu_raw(in.positions, DType::I32, {t}), cpu_f32(in.rope, {in.max_pos, d}),
                             cpu_raw(in.slot_mapping, DType::I32, {t}), c.num_heads, c.num_kv_heads, d, cache, q);
    return read_cpu(q);
  }
};

TEST_P(RopeKvTest, MatchesCpu) {
  const RopeCase c = GetParam();
  const RopeInputs in(c, rng_);
  const int64_t slot_elems = int64_t{c.num_kv_heads} * c.head_dim;
  const std::initializer_list<int64_t> shape = {in.num_blocks, c.block_size, c.num_kv_heads, c.head_dim};
  // The caches start with random contents that untouched slots must keep.
  const auto k_init = random_bf16_values(rng_, in.slots * slot_elems);
  const auto v_init = random_bf16_values(rng_, in.slots * slot_elems);
  KvCacheLayer gcache{gpu_bf16(k_init, shape), gpu_bf16(v_init, shape)};
  KvCacheLayer ccache{cpu_f32(k_init, shape), cpu_f32(v_init, shape)};
  expect_rel_l2(run_gpu(c, in, gcache), run_cpu(c, in, ccache), 1e-2, "q");
  expect_rel_l2(read_gpu(gcache.k), read_cpu(ccache.k), 1e-2, "k cache");
  EXPECT_EQ(read_gpu(gcache.v), read_cpu(ccache.v)) << "v cache";
  // Slots of skipped tokens and never-mapped slots are untouched, bit for bit.
  const auto gk = read_gpu(gcache.k);
  const std::vector<bool> written = in.written_slots();
  for (int64_t s = 0; s < in.slots; ++s) {
    if (written[static_cast<size_t>(s)]) continue;
    for (int64_t j = 0; j < slot_elems; ++j)
      ASSERT_EQ(gk[s * slot_elems + j], k_init[s * slot_elems + j]) << "slot " << s << " was written";
  }
}

// FP8 cache: the same codes as the CPU backend writes (both round value / scale once, to nearest even with
// saturation). V is the bf16 input itself, so its codes must be equal; K goes through the norm and rotation in
// fp32 with another summation order, so a value on a rounding boundary may land on the neighbouring code.
// Untouched slots keep their bytes (on both sides, so any stray write shows as a difference).
TEST_P(RopeKvTest, Fp8CacheHoldsTheCpuCodes) {
  const RopeCase c = GetParam();
  if (c.head_dim == 256) GTEST_SKIP() << "attention takes head_dim 64 or 128 only";
  const RopeInputs in(c, rng_);
  const int64_t slot_elems = int64_t{c.num_kv_heads} * c.head_dim;
  const std::initializer_list<int64_t> shape = {in.num_blocks, c.block_size, c.num_kv_heads, c.head_dim};
  std::vector<uint8_t> k_init(static_cast<size_t>(in.slots * slot_elems)), v_init(k_init.size());
  for (auto& b : k_init) b = static_cast<uint8_t>(rng_() & 0x77);  // finite codes
  for (auto& b : v_init) b = static_cast<uint8_t>(rng_() & 0x77);
  const float k_scale = 0.043f, v_scale = 0.0071f;
  KvCacheLayer gcache{gpu_raw(k_init, DType::F8_E4M3, shape), gpu_raw(v_init, DType::F8_E4M3, shape), k_scale, v_scale};
  KvCacheLayer ccache{cpu_raw(k_init, DType::F8_E4M3, shape), cpu_raw(v_init, DType::F8_E4M3, shape), k_scale, v_scale};
  expect_rel_l2(run_gpu(c, in, gcache), run_cpu(c, in, ccache), 1e-2, "q");
  const auto gk = read_gpu_bytes(gcache.k), gv = read_gpu_bytes(gcache.v);
  const auto* ck = ccache.k.as<const uint8_t>();
  const auto* cv = ccache.v.as<const uint8_t>();
  int64_t neighbours = 0;
  for (size_t i = 0; i < gk.size(); ++i) {
    ASSERT_EQ(gv[i], cv[i]) << "v code " << i;
    if (gk[i] == ck[i]) continue;
    // Neighbouring codes of one sign differ by one in their low seven bits.
    ASSERT_EQ(gk[i] & 0x80, ck[i] & 0x80) << "k code " << i;
    ASSERT_EQ(std::abs((gk[i] & 0x7f) - (ck[i] & 0x7f)), 1) << "k code " << i;
    ++neighbours;
  }
  const std::vector<bool> written = in.written_slots();
  const int64_t written_elems = std::count(written.begin(), written.end(), true) * slot_elems;
  EXPECT_LE(neighbours, written_elems / 50 + 1) << "too many K codes off by one";
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
                           std::string name = "T";
                           return name + std::to_string(c.tokens) + "_nh" + std::to_string(c.num_heads) + "_nkv" +
                                  std::to_string(c.num_kv_heads) + "_d" + std::to_string(c.head_dim) + "_bs" +
                                  std::to_string(c.block_size) + (c.qk_norm ? "_norm" : "_nonorm");
                         });

}  // namespace
}  // namespace nanovllm::test
