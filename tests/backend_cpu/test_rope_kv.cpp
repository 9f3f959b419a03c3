// qk_norm_rope_cache against a double-precision reference: q to q_out, k and v to their cache slots, nothing
// else in the cache touched, slot -1 skipped, the norms skipped when their weights are empty (Qwen2).
#include <algorithm>
#include <numeric>

#include "common/fp8.h"
#include "test_helpers.h"

namespace nanovllm {
namespace {

using test::poisoned_f32;
using test::random_f32;

struct RopeCase {
  int64_t tokens, nh, nkv, d;
  bool with_norm;
};

class RopeKv : public ::testing::TestWithParam<RopeCase> {};

// Normalised (optionally) and rotated head in double, appended to want; scale gets the sizes of the two
// rotation terms of each element.
void reference_head(const float* x, const float* norm, double eps, const float* rope_row, int64_t d,
                    std::vector<double>& want, std::vector<double>& scale) {
  std::vector<double> v(d);
  double sum = 0;
  for (int64_t i = 0; i < d; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double inv = norm ? 1.0 / std::sqrt(sum / d + eps) : 1.0;
  for (int64_t i = 0; i < d; ++i) v[i] = x[i] * inv * (norm ? norm[i] : 1.0);
  const int64_t h = d / 2;
  for (int64_t i = 0; i < d; ++i) {
    const int64_t j = i % h;  // frequency index
    const double c = rope_row[j], s = rope_row[h + j];
    // out[i] = v[i] cos - v[i+h] sin (first half); v[i] cos + v[i-h] sin (second half)
    const double partner = i < h ? -v[i + h] : v[i - h];
    want.push_back(v[i] * c + partner * s);
    scale.push_back(std::fabs(v[i] * c) + std::fabs(partner * s) + 1e-30);
  }
}

// One step's inputs: qkv in [-range, range], the norms (when the case has them), a rope table of max_pos
// positions, random positions (the first at the table's end) and the given slots (-1: no cache write).
struct RopeStep {
  static constexpr float kEps = 1e-6f;
  test::OwnedTensor qkv, q_norm, k_norm, rope, positions_t, slots_t;
  std::vector<int32_t> positions, slots;

  RopeStep(CpuBackend& backend, const RopeCase& c, std::mt19937& rng, int32_t max_pos, float range,
           std::vector<int32_t> slot_of_token)
      : slots(std::move(slot_of_token)) {
    qkv = random_f32(backend, {c.tokens, (c.nh + 2 * c.nkv) * c.d}, rng, -range, range);
    if (c.with_norm) {
      q_norm = random_f32(backend, {c.d}, rng, 0.5f, 1.5f);
      k_norm = random_f32(backend, {c.d}, rng, -1.5f, 1.5f);
    }
    rope = test::make_rope_table(backend, max_pos, c.d, 1000000.0);
    for (int64_t t = 0; t < c.tokens; ++t) positions.push_back(static_cast<int32_t>(rng() % max_pos));
    positions[0] = max_pos - 1;
    positions_t = test::i32_tensor(backend, positions);
    slots_t = test::i32_tensor(backend, slots);
  }
  void run(CpuBackend& backend, const RopeCase& c, KvCacheLayer& cache, test::OwnedTensor& q_out) const {
    backend.qk_norm_rope_cache(qkv.tensor, q_norm.tensor, k_norm.tensor, kEps, positions_t.tensor, rope.tensor,
                               slots_t.tensor, static_cast<int>(c.nh), static_cast<int>(c.nkv), static_cast<int>(c.d),
                               cache, q_out.tensor);
  }
};

TEST_P(RopeKv, MatchesReferenceAndWritesOnlyItsSlots) {
  const RopeCase c = GetParam();
  CpuBackend backend;
  std::mt19937 rng(static_cast<unsigned>(c.tokens * 1000 + c.nh * 10 + c.d + c.with_norm));
  const int64_t block_size = 16, num_blocks = 7;
  std::vector<int32_t> free_slots(block_size * num_blocks), slots(c.tokens);
  std::iota(free_slots.begin(), free_slots.end(), 0);
  std::shuffle(free_slots.begin(), free_slots.end(), rng);
  for (int64_t t = 0; t < c.tokens; ++t)
    slots[t] = (t % 5 == 1) ? -1 : free_slots[t];  // every fifth token (from the second) writes nothing
  const RopeStep step(backend, c, rng, 2048, 2.0f, slots);
  const float eps = RopeStep::kEps;
  const auto &qkv = step.qkv, &q_norm = step.q_norm, &k_norm = step.k_norm, &rope = step.rope;
  const std::vector<int32_t>& positions = step.positions;
  auto k_cache = random_f32(backend, {num_blocks, block_size, c.nkv, c.d}, rng);
  auto v_cache = random_f32(backend, {num_blocks, block_size, c.nkv, c.d}, rng);
  const auto k_before = k_cache.to_vector(), v_before = v_cache.to_vector();
  KvCacheLayer cache{k_cache.tensor, v_cache.tensor};
  auto q_out = poisoned_f32(backend, {c.tokens, c.nh * c.d});
  step.run(backend, c, cache, q_out);

  const int64_t width = (c.nh + 2 * c.nkv) * c.d;
  std::vector<double> want, scale;
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t h = 0; h < c.nh; ++h)
      reference_head(qkv.f32() + t * width + h * c.d, c.with_norm ? q_norm.f32() : nullptr, eps,
                     rope.f32() + positions[t] * c.d, c.d, want, scale);
  test::expect_close(q_out.f32(), want, scale, 1e-5, "q_out");

  std::vector<bool> written(block_size * num_blocks, false);
  for (int64_t t = 0; t < c.tokens; ++t) {
    if (slots[t] < 0) continue;
    written[slots[t]] = true;
    for (int64_t h = 0; h < c.nkv; ++h) {
      std::vector<double> k_want, k_scale;
      reference_head(qkv.f32() + t * width + (c.nh + h) * c.d, c.with_norm ? k_norm.f32() : nullptr, eps,
                     rope.f32() + positions[t] * c.d, c.d, k_want, k_scale);
      const int64_t at = (slots[t] * c.nkv + h) * c.d;
      test::expect_close(k_cache.f32() + at, k_want, k_scale, 1e-5, "k cache");
      for (int64_t i = 0; i < c.d; ++i)
        ASSERT_EQ(v_cache.f32()[at + i], qkv.f32()[t * width + (c.nh + c.nkv + h) * c.d + i]);
    }
  }
  const int64_t per_slot = c.nkv * c.d;
  for (int64_t s = 0; s < block_size * num_blocks; ++s) {
    if (written[s]) continue;
    for (int64_t i = 0; i < per_slot; ++i) {
      ASSERT_EQ(k_cache.f32()[s * per_slot + i], k_before[s * per_slot + i]) << "slot " << s;
      ASSERT_EQ(v_cache.f32()[s * per_slot + i], v_before[s * per_slot + i]) << "slot " << s;
    }
  }
}

// With an FP8 cache every written element is the code of (what the F32 cache gets) / scale, exactly; the
// slots nobody writes keep their bytes.
TEST_P(RopeKv, Fp8CacheHoldsTheCodesOfTheF32Values) {
  const RopeCase c = GetParam();
  CpuBackend backend;
  std::mt19937 rng(static_cast<unsigned>(c.tokens * 1000 + c.nh * 10 + c.d + c.with_norm + 7));
  const int64_t block_size = 16, num_blocks = 5, slots_total = block_size * num_blocks;
  std::vector<int32_t> slots(c.tokens);
  for (int64_t t = 0; t < c.tokens; ++t) slots[t] = (t % 4 == 2) ? -1 : static_cast<int32_t>((t * 7 + 3) % slots_total);
  const RopeStep step(backend, c, rng, 512, 3.0f, slots);
  auto k_f32 = random_f32(backend, {num_blocks, block_size, c.nkv, c.d}, rng);
  auto v_f32 = random_f32(backend, {num_blocks, block_size, c.nkv, c.d}, rng);
  auto k_fp8 = test::make_tensor(backend, DType::F8_E4M3, {num_blocks, block_size, c.nkv, c.d});
  auto v_fp8 = test::make_tensor(backend, DType::F8_E4M3, {num_blocks, block_size, c.nkv, c.d});
  std::fill_n(k_fp8.tensor.as<uint8_t>(), k_fp8.numel(), uint8_t{0x55});
  std::fill_n(v_fp8.tensor.as<uint8_t>(), v_fp8.numel(), uint8_t{0xAA});
  const float k_scale = 0.037f, v_scale = 0.0061f;
  KvCacheLayer f32_cache{k_f32.tensor, v_f32.tensor};
  KvCacheLayer fp8_cache{k_fp8.tensor, v_fp8.tensor, k_scale, v_scale};
  auto q_f32 = poisoned_f32(backend, {c.tokens, c.nh * c.d});
  auto q_fp8 = poisoned_f32(backend, {c.tokens, c.nh * c.d});
  step.run(backend, c, f32_cache, q_f32);
  step.run(backend, c, fp8_cache, q_fp8);
  for (int64_t i = 0; i < q_f32.numel(); ++i) ASSERT_EQ(q_fp8.f32()[i], q_f32.f32()[i]) << i;
  std::vector<bool> written(slots_total, false);
  for (int32_t slot : slots)
    if (slot >= 0) written[slot] = true;
  const int64_t per_slot = c.nkv * c.d;
  for (int64_t s = 0; s < slots_total; ++s) {
    for (int64_t i = 0; i < per_slot; ++i) {
      const int64_t at = s * per_slot + i;
      const uint8_t k_code = k_fp8.tensor.as<uint8_t>()[at], v_code = v_fp8.tensor.as<uint8_t>()[at];
      if (!written[s]) {
        ASSERT_EQ(k_code, 0x55) << "slot " << s;
        ASSERT_EQ(v_code, 0xAA) << "slot " << s;
        continue;
      }
      ASSERT_EQ(k_code, float_to_fp8_e4m3(k_f32.f32()[at] / k_scale)) << "slot " << s << " element " << i;
      ASSERT_EQ(v_code, float_to_fp8_e4m3(v_f32.f32()[at] / v_scale)) << "slot " << s << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RopeKv,
                         ::testing::Values(RopeCase{1, 16, 8, 128, true}, RopeCase{3, 16, 8, 128, true},
                                           RopeCase{17, 16, 8, 128, false}, RopeCase{33, 4, 4, 64, true},
                                           RopeCase{17, 8, 1, 16, true}, RopeCase{3, 32, 4, 64, false},
                                           RopeCase{33, 16, 2, 16, true}, RopeCase{1, 2, 2, 16, false}));

TEST(CpuBackendRopeKv, RejectsPositionPastTheTableAndBadSlot) {
  CpuBackend backend;
  std::mt19937 rng(31);
  const int64_t nh = 2, nkv = 1, d = 16;
  auto qkv = random_f32(backend, {2, (nh + 2 * nkv) * d}, rng);
  auto rope = test::make_rope_table(backend, 8, d, 10000.0);
  auto k_cache = random_f32(backend, {2, 4, nkv, d}, rng);
  auto v_cache = random_f32(backend, {2, 4, nkv, d}, rng);
  KvCacheLayer cache{k_cache.tensor, v_cache.tensor};
  auto q_out = poisoned_f32(backend, {2, nh * d});
  auto good_slots = test::i32_tensor(backend, {0, 7});
  auto past_positions = test::i32_tensor(backend, {0, 8});
  EXPECT_THROW(backend.qk_norm_rope_cache(qkv.tensor, Tensor(), Tensor(), 1e-6f, past_positions.tensor, rope.tensor,
                                          good_slots.tensor, nh, nkv, d, cache, q_out.tensor),
               EngineError);
  auto positions = test::i32_tensor(backend, {0, 7});
  auto bad_slots = test::i32_tensor(backend, {0, 8});
  EXPECT_THROW(backend.qk_norm_rope_cache(qkv.tensor, Tensor(), Tensor(), 1e-6f, positions.tensor, rope.tensor,
                                          bad_slots.tensor, nh, nkv, d, cache, q_out.tensor),
               EngineError);
}

}  // namespace
}  // namespace nanovllm
