// Every op writes every element of its outputs: outputs start as NaN and must come back all finite. Inputs
// are finite and random, so any NaN left is an element the op skipped.
#include "test_helpers.h"

namespace nanovllm {
namespace {

using test::OwnedTensor;
using test::poisoned_f32;
using test::random_f32;

void expect_all_finite(const OwnedTensor& t, const char* what) {
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(std::isfinite(t.f32()[i])) << what << "[" << i << "]";
}

TEST(CpuPoison, EveryOutputElementIsWritten) {
  CpuBackend backend;
  std::mt19937 rng(71);
  const int64_t tokens = 17, hidden = 96, nh = 6, nkv = 2, d = 16, inter = 48, vocab = 101;

  auto ids = test::i32_tensor(backend, {3, 0, 100, 7, 7, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 99});
  auto table = random_f32(backend, {vocab, hidden}, rng);
  auto embedded = poisoned_f32(backend, {tokens, hidden});
  backend.embedding(ids.tensor, table.tensor, 0, embedded.tensor);
  expect_all_finite(embedded, "embedding");

  auto weight = random_f32(backend, {hidden}, rng);
  auto normed = poisoned_f32(backend, {tokens, hidden});
  backend.rms_norm(embedded.tensor, weight.tensor, 1e-6f, normed.tensor);
  expect_all_finite(normed, "rms_norm");
  auto residual = random_f32(backend, {tokens, hidden}, rng);
  auto normed2 = poisoned_f32(backend, {tokens, hidden});
  backend.add_rms_norm(normed.tensor, residual.tensor, weight.tensor, 1e-6f, normed2.tensor);
  expect_all_finite(normed2, "add_rms_norm");

  for (int64_t t : {int64_t{1}, int64_t{5}, tokens}) {
    auto w = random_f32(backend, {(nh + 2 * nkv) * d, hidden}, rng);
    auto qkv = poisoned_f32(backend, {t, (nh + 2 * nkv) * d});
    backend.linear(normed2.tensor.rows(0, t), w.tensor, Tensor(), qkv.tensor);
    expect_all_finite(qkv, "linear");
  }

  auto qkv = random_f32(backend, {tokens, (nh + 2 * nkv) * d}, rng);
  auto q_norm = random_f32(backend, {d}, rng);
  auto k_norm = random_f32(backend, {d}, rng);
  auto rope = test::make_rope_table(backend, 64, d, 10000.0);
  std::vector<int32_t> positions(tokens), slots(tokens);
  for (int64_t t = 0; t < tokens; ++t) positions[t] = slots[t] = static_cast<int32_t>(t);
  auto positions_t = test::i32_tensor(backend, positions);
  auto slots_t = test::i32_tensor(backend, slots);
  // A poisoned cache: the slots written are then read by attention, which must see no NaN.
  auto k_cache = poisoned_f32(backend, {2, 16, nkv, d});
  auto v_cache = poisoned_f32(backend, {2, 16, nkv, d});
  KvCacheLayer cache{k_cache.tensor, v_cache.tensor};
  auto q = poisoned_f32(backend, {tokens, nh * d});
  backend.qk_norm_rope_cache(qkv.tensor, q_norm.tensor, k_norm.tensor, 1e-6f, positions_t.tensor, rope.tensor,
                             slots_t.tensor, nh, nkv, d, cache, q.tensor);
  expect_all_finite(q, "qk_norm_rope_cache q");

  auto cu = test::i32_tensor(backend, {0, tokens});
  auto lens = test::i32_tensor(backend, {static_cast<int32_t>(tokens)});
  auto tables = test::i32_tensor(backend, {0, 1});
  AttentionBatch batch{cu.tensor, lens.tensor, tables.tensor, 1, static_cast<int>(tokens), static_cast<int>(tokens),
                       2,         16,          false};
  auto attn = poisoned_f32(backend, {tokens, nh * d});
  backend.paged_attention(q.tensor, cache, batch, nh, nkv, d, 0.25f, attn.tensor);
  expect_all_finite(attn, "paged_attention");

  auto gate_up = random_f32(backend, {tokens, 2 * inter}, rng);
  auto act = poisoned_f32(backend, {tokens, inter});
  backend.silu_and_mul(gate_up.tensor, act.tensor);
  expect_all_finite(act, "silu_and_mul");

  auto rows = test::i32_tensor(backend, {16, 0, 9});
  auto gathered = poisoned_f32(backend, {3, hidden});
  backend.gather_rows(normed2.tensor, rows.tensor, gathered.tensor);
  expect_all_finite(gathered, "gather_rows");

  auto logits = random_f32(backend, {3, vocab}, rng, -5.0f, 5.0f);
  auto targets = test::i32_tensor(backend, {1, 2, 100});
  auto target_lp = poisoned_f32(backend, {3});
  auto top_ids = test::make_tensor(backend, DType::I32, {3, 4});
  auto top_lp = poisoned_f32(backend, {3, 4});
  for (int64_t i = 0; i < 12; ++i) top_ids.i32()[i] = -1;
  backend.logprobs(logits.tensor, targets.tensor, 4, target_lp.tensor, top_ids.tensor, top_lp.tensor);
  expect_all_finite(target_lp, "logprobs target");
  expect_all_finite(top_lp, "logprobs top");
  for (int64_t i = 0; i < 12; ++i) EXPECT_GE(top_ids.i32()[i], 0);

  auto temperature = test::f32_tensor(backend, {0.0f, 1.0f, 0.8f});
  auto top_k = test::i32_tensor(backend, {0, 5, 0});
  auto top_p = test::f32_tensor(backend, {1.0f, 0.9f, 1.0f});
  auto min_p = test::f32_tensor(backend, {0.0f, 0.0f, 0.1f});
  auto seed = test::make_tensor(backend, DType::I64, {3});
  for (int i = 0; i < 3; ++i) seed.tensor.as<int64_t>()[i] = 42 + i;
  auto step = test::i32_tensor(backend, {1, 2, 3});
  SamplerInputs in{temperature.tensor, top_k.tensor, top_p.tensor, min_p.tensor, seed.tensor, step.tensor};
  auto tokens_out = test::i32_tensor(backend, {-1, -1, -1});
  backend.sample(logits.tensor, in, tokens_out.tensor);
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(tokens_out.i32()[i], 0);
    EXPECT_LT(tokens_out.i32()[i], vocab);
  }
}

}  // namespace
}  // namespace nanovllm
