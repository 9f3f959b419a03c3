// paged_attention against a double-precision reference: decode, prefill, chunked prefill / prefix hits and
// mixed batches; GQA ratios 1 to 8; head_dim 16 to 128; block sizes 16, 32, 256 with sequences crossing block
// boundaries; block tables of shuffled, non-contiguous block ids padded with -1; the rest of the cache random
// so a wrong block or offset shows.
#include <algorithm>
#include <numeric>
#include <string>

#include "common/fp8.h"
#include "test_helpers.h"

namespace nanovllm {
namespace {

using test::OwnedTensor;
using test::random_f32;

struct SeqShape {
  int q_len;
  int k_len;
};

struct AttentionCase {
  std::string name;
  int nh, nkv, d, block_size;
  std::vector<SeqShape> seqs;
};

struct AttentionSetup {
  OwnedTensor q, k_cache, v_cache, cu, lens, tables;
  AttentionBatch batch;
  std::vector<int32_t> cu_host, lens_host, table_host;
  int64_t tokens = 0;
};

AttentionSetup build(CpuBackend& backend, const AttentionCase& c, std::mt19937& rng) {
  AttentionSetup s;
  int max_blocks = 0, needed = 0;
  s.cu_host.push_back(0);
  for (const SeqShape& q : c.seqs) {
    const int blocks = (q.k_len + c.block_size - 1) / c.block_size;
    max_blocks = std::max(max_blocks, blocks);
    needed += blocks;
    s.cu_host.push_back(s.cu_host.back() + q.q_len);
    s.lens_host.push_back(q.k_len);
  }
  max_blocks += 1;                    // every row of the table ends in -1 padding
  const int num_blocks = needed + 3;  // spare blocks full of random numbers nobody should read
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (const SeqShape& q : c.seqs) {
    const int blocks = (q.k_len + c.block_size - 1) / c.block_size;
    for (int b = 0; b < max_blocks; ++b) s.table_host.push_back(b < blocks ? ids[next++] : -1);
  }
  s.tokens = s.cu_host.back();
  s.q = random_f32(backend, {s.tokens, int64_t{c.nh} * c.d}, rng, -4.0f, 4.0f);
  s.k_cache = random_f32(backend, {num_blocks, c.block_size, c.nkv, c.d}, rng);
  s.v_cache = random_f32(backend, {num_blocks, c.block_size, c.nkv, c.d}, rng);
  s.cu = test::i32_tensor(backend, s.cu_host);
  s.lens = test::i32_tensor(backend, s.lens_host);
  s.tables = test::i32_tensor(backend, s.table_host);
  s.tables.tensor = s.tables.tensor.reshaped({static_cast<int64_t>(c.seqs.size()), max_blocks});
  s.batch.cu_seqlens_q = s.cu.tensor;
  s.batch.seq_lens_k = s.lens.tensor;
  s.batch.block_tables = s.tables.tensor;
  s.batch.num_seqs = static_cast<int>(c.seqs.size());
  s.batch.max_blocks_per_seq = max_blocks;
  s.batch.block_size = c.block_size;
  for (const SeqShape& q : c.seqs) {
    s.batch.max_seqlen_q = std::max(s.batch.max_seqlen_q, q.q_len);
    s.batch.max_seqlen_k = std::max(s.batch.max_seqlen_k, q.k_len);
  }
  s.batch.decode_only = std::all_of(c.seqs.begin(), c.seqs.end(), [](const SeqShape& q) { return q.q_len == 1; });
  return s;
}

// Plain causal softmax attention in double, reading keys through the block table; scale[i] = Σ p_j |v_j|.
void reference(const AttentionCase& c, const AttentionSetup& s, float softmax_scale, std::vector<double>& want,
               std::vector<double>& scale) {
  const int64_t d = c.d, nh = c.nh, group = c.nh / c.nkv;
  want.assign(s.tokens * nh * d, 0.0);
  scale.assign(s.tokens * nh * d, 1e-30);
  const float* q = s.q.f32();
  const float* k = s.k_cache.f32();
  const float* v = s.v_cache.f32();
  const int max_blocks = s.batch.max_blocks_per_seq;
  const auto key_at = [&](size_t seq, int64_t j, int64_t kv_head) {
    const int64_t block = s.table_host[seq * max_blocks + j / c.block_size];
    return ((block * c.block_size + j % c.block_size) * c.nkv + kv_head) * d;
  };
  for (size_t seq = 0; seq < c.seqs.size(); ++seq) {
    const int q_len = c.seqs[seq].q_len, k_len = c.seqs[seq].k_len;
    for (int i = 0; i < q_len; ++i) {
      const int64_t row = s.cu_host[seq] + i;
      const int64_t last_key = k_len - q_len + i;
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t kv_head = h / group;
        std::vector<double> p(last_key + 1);
        double max_score = -1e300;
        for (int64_t j = 0; j <= last_key; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < d; ++x)
            dot += static_cast<double>(q[(row * nh + h) * d + x]) * k[key_at(seq, j, kv_head) + x];
          p[j] = dot * softmax_scale;
          max_score = std::max(max_score, p[j]);
        }
        double total = 0;
        for (double& e : p) total += (e = std::exp(e - max_score));
        for (int64_t j = 0; j <= last_key; ++j) {
          const double weight = p[j] / total;
          for (int64_t x = 0; x < d; ++x) {
            const double value = v[key_at(seq, j, kv_head) + x];
            want[(row * nh + h) * d + x] += weight * value;
            scale[(row * nh + h) * d + x] += weight * std::fabs(value);
          }
        }
      }
    }
  }
}

class PagedAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(PagedAttention, MatchesReference) {
  const AttentionCase& c = GetParam();
  CpuBackend backend;
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(c.name)));
  AttentionSetup s = build(backend, c, rng);
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  auto out = test::poisoned_f32(backend, {s.tokens, int64_t{c.nh} * c.d});
  KvCacheLayer cache{s.k_cache.tensor, s.v_cache.tensor};
  backend.paged_attention(s.q.tensor, cache, s.batch, c.nh, c.nkv, c.d, softmax_scale, out.tensor);
  std::vector<double> want, scale;
  reference(c, s, softmax_scale, want, scale);
  test::expect_close(out.f32(), want, scale, 1e-5, c.name.c_str());

  // Each (row, KV head) is computed alone, so the thread count cannot change a single bit.
  CpuBackend single(1);
  auto out_single = test::poisoned_f32(backend, {s.tokens, int64_t{c.nh} * c.d});
  single.paged_attention(s.q.tensor, cache, s.batch, c.nh, c.nkv, c.d, softmax_scale, out_single.tensor);
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.f32()[i], out_single.f32()[i]) << i;
}

// An FP8 cache is attended as the F32 cache of its dequantised values (code x scale): bit for bit the same
// output, at scales that are not powers of two (so a forgotten or misapplied scale shows).
TEST_P(PagedAttention, Fp8CacheAttendsItsDequantisedValues) {
  const AttentionCase& c = GetParam();
  CpuBackend backend;
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(c.name)) + 1);
  AttentionSetup s = build(backend, c, rng);
  const float k_scale = 0.0123f, v_scale = 1.7f;
  const auto fp8_and_values = [&](const OwnedTensor& cache, float scale, OwnedTensor& codes, OwnedTensor& values) {
    const std::initializer_list<int64_t> shape = {cache.tensor.dim(0), cache.tensor.dim(1), cache.tensor.dim(2),
                                                  cache.tensor.dim(3)};
    codes = test::make_tensor(backend, DType::F8_E4M3, shape);
    values = test::make_tensor(backend, DType::F32, shape);
    for (int64_t i = 0; i < cache.numel(); ++i) {
      // Spread over FP8's binades, subnormals included, as real K/V after the scale would be.
      const float x = cache.f32()[i] * std::exp2(static_cast<float>(i % 23) - 14.0f) * scale;
      codes.tensor.as<uint8_t>()[i] = float_to_fp8_e4m3(x / scale);
      values.f32()[i] = fp8_e4m3_to_float(codes.tensor.as<uint8_t>()[i]) * scale;
    }
  };
  OwnedTensor k_codes, k_values, v_codes, v_values;
  fp8_and_values(s.k_cache, k_scale, k_codes, k_values);
  fp8_and_values(s.v_cache, v_scale, v_codes, v_values);
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  auto out_fp8 = test::poisoned_f32(backend, {s.tokens, int64_t{c.nh} * c.d});
  auto out_f32 = test::poisoned_f32(backend, {s.tokens, int64_t{c.nh} * c.d});
  KvCacheLayer fp8_cache{k_codes.tensor, v_codes.tensor, k_scale, v_scale};
  KvCacheLayer f32_cache{k_values.tensor, v_values.tensor};
  backend.paged_attention(s.q.tensor, fp8_cache, s.batch, c.nh, c.nkv, c.d, softmax_scale, out_fp8.tensor);
  backend.paged_attention(s.q.tensor, f32_cache, s.batch, c.nh, c.nkv, c.d, softmax_scale, out_f32.tensor);
  for (int64_t i = 0; i < out_fp8.numel(); ++i) {
    ASSERT_FALSE(std::isnan(out_fp8.f32()[i])) << i;
    ASSERT_EQ(out_fp8.f32()[i], out_f32.f32()[i]) << i;
  }
}

std::vector<AttentionCase> cases() {
  const std::vector<SeqShape> decode = {{1, 1}, {1, 16}, {1, 17}, {1, 33}, {1, 100}};
  const std::vector<SeqShape> prefill = {{1, 1}, {3, 3}, {17, 17}, {33, 33}};
  const std::vector<SeqShape> chunked = {{17, 300}, {33, 513}, {1, 257}, {3, 256}};
  return {
      {"decode_gqa1_d128_bs16", 8, 8, 128, 16, decode},
      {"decode_gqa2_d128_bs16", 8, 4, 128, 16, decode},
      {"decode_gqa4_d64_bs16", 8, 2, 64, 16, decode},
      {"decode_gqa8_d16_bs32", 8, 1, 16, 32, decode},
      {"prefill_gqa1_d64_bs32", 4, 4, 64, 32, prefill},
      {"prefill_gqa2_d128_bs16", 16, 8, 128, 16, prefill},
      {"prefill_gqa8_d16_bs16", 16, 2, 16, 16, prefill},
      {"chunked_gqa2_d128_bs256", 4, 2, 128, 256, chunked},
      {"chunked_gqa4_d64_bs16", 8, 2, 64, 16, chunked},
      {"mixed_gqa1_d16_bs16", 2, 2, 16, 16, {{1, 40}, {33, 33}, {5, 70}, {1, 1}, {17, 49}}},
      {"mixed_gqa8_d64_bs32", 8, 1, 64, 32, {{3, 95}, {1, 64}, {17, 17}, {1, 65}}},
      {"qwen3_shape_bs256", 16, 8, 128, 256, {{33, 600}, {1, 1000}, {1, 256}}},
      // One decode row: work is split over KV heads (how many per item depends on the thread count).
      {"decode_single_qwen3_shape_bs16", 16, 8, 128, 16, {{1, 77}}},
      {"decode_single_gqa4_d64_bs32", 16, 4, 64, 32, {{1, 33}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, PagedAttention, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) { return info.param.name; });

TEST(CpuBackendAttention, RejectsBlockOutsideTheCache) {
  CpuBackend backend;
  std::mt19937 rng(41);
  AttentionCase c{"bad", 2, 1, 16, 16, {{1, 20}}};
  AttentionSetup s = build(backend, c, rng);
  s.tables.i32()[1] = 1000;  // the second block of the only sequence
  auto out = test::poisoned_f32(backend, {s.tokens, 32});
  KvCacheLayer cache{s.k_cache.tensor, s.v_cache.tensor};
  EXPECT_THROW(backend.paged_attention(s.q.tensor, cache, s.batch, 2, 1, 16, 0.25f, out.tensor), EngineError);
  s.tables.i32()[1] = -1;
  EXPECT_THROW(backend.paged_attention(s.q.tensor, cache, s.batch, 2, 1, 16, 0.25f, out.tensor), EngineError);
}

TEST(CpuBackendAttention, RejectsMixedCacheDtypesAndBadFp8Scales) {
  CpuBackend backend;
  std::mt19937 rng(43);
  AttentionCase c{"bad", 2, 1, 16, 16, {{1, 20}}};
  AttentionSetup s = build(backend, c, rng);
  auto out = test::poisoned_f32(backend, {s.tokens, 32});
  auto codes = test::make_tensor(backend, DType::F8_E4M3, {s.k_cache.tensor.dim(0), 16, 1, 16});
  std::fill_n(codes.tensor.as<uint8_t>(), codes.numel(), uint8_t{0x38});
  KvCacheLayer mixed{codes.tensor, s.v_cache.tensor};
  EXPECT_THROW(backend.paged_attention(s.q.tensor, mixed, s.batch, 2, 1, 16, 0.25f, out.tensor), EngineError);
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    KvCacheLayer fp8{codes.tensor, codes.tensor, bad, 1.0f};
    EXPECT_THROW(backend.paged_attention(s.q.tensor, fp8, s.batch, 2, 1, 16, 0.25f, out.tensor), EngineError) << bad;
  }
}

}  // namespace
}  // namespace nanovllm
