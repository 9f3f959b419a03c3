// Drives schedule()/postprocess() with random requests against a tiny KV cache and a fake model that "writes"
// each position's KV as a hash of the prefix it depends on. Checks, every step, that the batch respects the
// limits, that every token attended to was written by an earlier step into the slot the block table names,
// that no shared block is ever written, and that ref counts and the free list agree; at the end, that every
// block is free and every request got exactly the tokens it should. Every case runs under both step policies:
// decode-first must give every decoding sequence its token each step (unless preempted, or more of them than the
// budget), prefill-first must never mix prefill and decode rows.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "engine/scheduler.h"
#include "test_util.h"

namespace nanovllm {
namespace {

using test::fake_next_token;

constexpr int32_t kEos = 3;

struct SimulationCase {
  int block_size;
  int num_blocks;
  int max_num_batched_tokens;
  int max_num_seqs;
  int max_model_len;
  bool prefix_caching;
  double abort_probability;
  uint32_t seed;
};

std::ostream& operator<<(std::ostream& os, const SimulationCase& c) {
  return os << "bs" << c.block_size << "_blocks" << c.num_blocks << "_budget" << c.max_num_batched_tokens << "_seqs"
            << c.max_num_seqs << "_len" << c.max_model_len << (c.prefix_caching ? "_cache" : "_nocache") << "_abort"
            << c.abort_probability << "_seed" << c.seed;
}

// The fake model: the token after `position` tokens; EOS now and then, which ignore_eos must skip.
int32_t model_token(int64_t seq_id, int position) {
  const int32_t token = fake_next_token(seq_id, position);
  return token % 7 == 0 ? kEos : token;
}

// KV "content" of each position: depends on every token up to it, as real K/V does. Extends `keys` (the
// sequence's keys so far) to cover all of `tokens`.
void extend_prefix_keys(const std::vector<int32_t>& tokens, std::vector<uint64_t>& keys) {
  uint64_t key = keys.empty() ? 0xcbf29ce484222325ull : keys.back();
  for (size_t i = keys.size(); i < tokens.size(); ++i) {
    key = ((key ^ static_cast<uint32_t>(tokens[i])) * 0x100000001b3ull) | 1;  // never 0, the "unwritten" marker
    keys.push_back(key);
  }
}

struct Expected {
  std::vector<int32_t> prompt;
  int num_tokens;  // completion tokens when it runs to the end
};

class SchedulerSimulation : public ::testing::TestWithParam<std::tuple<SimulationCase, StepPolicy>> {};

TEST_P(SchedulerSimulation, RandomRequestsAllFinishWithoutLeaks) {
  // Plain variables rather than a structured binding: the lambdas below capture them.
  const SimulationCase c = std::get<0>(GetParam());
  const StepPolicy policy = std::get<1>(GetParam());
  std::mt19937 rng(c.seed);
  EngineConfig config =
      test::small_config(c.block_size, c.max_num_batched_tokens, c.max_num_seqs, c.max_model_len, policy);
  config.enable_prefix_caching = c.prefix_caching;
  Scheduler scheduler(config, c.num_blocks, {kEos});
  const int capacity_tokens = c.num_blocks * c.block_size;

  // A few shared prefixes so that the prefix cache is hit (and sometimes evicted).
  std::vector<std::vector<int32_t>> families;
  for (int f = 0; f < 3; ++f) families.push_back(test::random_tokens(rng, 3 * c.block_size + 5));

  std::map<int64_t, Expected> expected;
  int64_t next_id = 0;
  const int total_requests = 40;
  auto add_random_request = [&] {
    const int64_t id = next_id++;
    const int max_prompt = std::min({c.max_model_len, capacity_tokens - 1, 3 * c.block_size});
    const int prompt_len = std::uniform_int_distribution<int>(1, max_prompt)(rng);
    std::vector<int32_t> prompt;
    if (rng() % 2 == 0) {
      const auto& family = families[rng() % families.size()];
      const int shared = std::min<int>(prompt_len, std::uniform_int_distribution<int>(0, family.size())(rng));
      prompt.assign(family.begin(), family.begin() + shared);
    }
    const auto rest = test::random_tokens(rng, prompt_len - static_cast<int>(prompt.size()));
    prompt.insert(prompt.end(), rest.begin(), rest.end());
    // max_tokens within what one sequence can hold in the whole cache (add() rejects more).
    const int room = std::max(capacity_tokens + 1 - prompt_len, 1);
    const int max_tokens = std::uniform_int_distribution<int>(1, std::min(room, 2 * c.block_size + 3))(rng);
    SamplingParams params;
    params.max_tokens = max_tokens;
    params.ignore_eos = true;
    scheduler.add(std::make_unique<Sequence>(id, prompt, params));
    const int until_max_len = std::max(1, c.max_model_len - prompt_len);
    expected[id] = Expected{prompt, std::min(max_tokens, until_max_len)};
  };
  while (next_id < 15) add_random_request();

  std::vector<uint64_t> kv_slots(static_cast<size_t>(capacity_tokens), 0);
  std::map<int64_t, std::vector<uint64_t>> prefix_keys;
  std::map<int64_t, std::pair<std::vector<int32_t>, FinishReason>> results;
  std::set<int64_t> aborted;
  const BlockManager& blocks = scheduler.block_manager();
  int steps = 0;
  int64_t cached_tokens = 0;   // prefix-cache hits at admission
  std::set<int64_t> decoding;  // prefilled and sampled since their last admission, as of the last postprocess

  while (!scheduler.is_finished() || next_id < total_requests) {
    ASSERT_LT(++steps, 20000) << "no progress";
    if (next_id < total_requests && rng() % 10 < 3) add_random_request();
    if (scheduler.is_finished()) continue;

    std::erase_if(decoding, [&](int64_t id) {
      const Sequence* seq = scheduler.find(id);
      return seq == nullptr || seq->status != SequenceStatus::Running;
    });
    ScheduledBatch batch = scheduler.schedule();
    ASSERT_FALSE(batch.empty()) << "unfinished work but nothing scheduled at step " << steps;
    ASSERT_LE(static_cast<int>(batch.items.size()), c.max_num_seqs);
    ASSERT_LE(batch.num_tokens, c.max_num_batched_tokens);
    ASSERT_LE(batch.num_decode_rows, static_cast<int>(batch.items.size()));
    if (policy == StepPolicy::PrefillFirst) {
      ASSERT_TRUE(batch.num_decode_rows == 0 || !batch.has_prefill()) << "a mixed step at step " << steps;
    }
    // Preempted by this schedule(): back to waiting, no longer decoding.
    std::erase_if(decoding, [&](int64_t id) { return scheduler.find(id)->status == SequenceStatus::Waiting; });
    std::set<int64_t> decoded;
    for (int i = 0; i < batch.num_decode_rows; ++i) {
      const ScheduledSequence& item = batch.items[i];
      ASSERT_TRUE(decoding.contains(item.seq->seq_id)) << "decode row of a sequence that is not decoding";
      ASSERT_EQ(item.num_new_tokens, 1);
      decoded.insert(item.seq->seq_id);
    }
    for (size_t i = batch.num_decode_rows; i < batch.items.size(); ++i) {
      ASSERT_FALSE(decoding.contains(batch.items[i].seq->seq_id)) << "prefill row of a decoding sequence";
    }
    if (policy == StepPolicy::DecodeFirst && static_cast<int>(decoding.size()) <= c.max_num_batched_tokens) {
      ASSERT_EQ(decoded, decoding) << "a decoding sequence got no token at step " << steps;
    }
    int sum = 0;
    std::vector<int32_t> sampled;
    for (const auto& item : batch.items) {
      Sequence& seq = *item.seq;
      const int start = seq.num_computed_tokens;
      const int end = start + item.num_new_tokens;
      sum += item.num_new_tokens;
      ASSERT_EQ(seq.status, SequenceStatus::Running);
      ASSERT_GE(item.num_new_tokens, 1);
      ASSERT_LE(end, seq.size());
      ASSERT_EQ(item.samples, end == seq.size());
      ASSERT_EQ(static_cast<int>(seq.block_table.size()), seq.num_blocks(c.block_size));
      auto slot = [&](int position) {
        return static_cast<size_t>(seq.block_table[position / c.block_size]) * c.block_size + position % c.block_size;
      };
      std::vector<uint64_t>& keys = prefix_keys[seq.seq_id];
      extend_prefix_keys(seq.token_ids, keys);
      // Attention reads every earlier position: each must hold this prefix's KV.
      for (int p = 0; p < start; ++p) {
        ASSERT_EQ(kv_slots[slot(p)], keys[p]) << "seq " << seq.seq_id << " position " << p;
      }
      for (int p = start; p < end; ++p) {
        ASSERT_EQ(blocks.ref_count(seq.block_table[p / c.block_size]), 1) << "write into a shared block";
        kv_slots[slot(p)] = keys[p];
      }
      if (!decoding.contains(seq.seq_id) && start == seq.num_cached_tokens) cached_tokens += seq.num_cached_tokens;
      if (item.samples) sampled.push_back(model_token(seq.seq_id, seq.size()));
    }
    ASSERT_EQ(sum, batch.num_tokens);
    scheduler.postprocess(batch, sampled);
    for (const auto& item : batch.items) {
      if (item.samples && item.seq->status == SequenceStatus::Running) decoding.insert(item.seq->seq_id);
    }

    // Ref counts equal the number of block-table entries that name each block; the rest are free.
    std::vector<int> references(c.num_blocks, 0);
    for (const auto& [id, _] : expected) {
      const Sequence* seq = scheduler.find(id);
      if (seq == nullptr) continue;
      if (seq->status != SequenceStatus::Running) {
        ASSERT_TRUE(seq->block_table.empty());
      }
      for (int32_t block : seq->block_table) ++references[block];
    }
    int in_use = 0;
    for (int b = 0; b < c.num_blocks; ++b) {
      ASSERT_EQ(blocks.ref_count(b), references[b]) << "block " << b;
      in_use += references[b] > 0;
    }
    ASSERT_EQ(blocks.num_free_blocks(), c.num_blocks - in_use);

    if (std::uniform_real_distribution<double>(0, 1)(rng) < c.abort_probability && !expected.empty()) {
      const int64_t victim = std::uniform_int_distribution<int64_t>(0, next_id - 1)(rng);
      if (const Sequence* seq = scheduler.find(victim); seq != nullptr && !seq->is_finished()) aborted.insert(victim);
      scheduler.abort(victim);
    }
    for (Sequence* done : scheduler.take_finished()) {
      ASSERT_TRUE(done->block_table.empty());
      results[done->seq_id] = {std::vector<int32_t>(done->token_ids), done->finish_reason};
      scheduler.release(done->seq_id);
    }
  }

  EXPECT_EQ(blocks.num_free_blocks(), c.num_blocks);
  ASSERT_EQ(static_cast<int>(results.size()), total_requests);
  for (const auto& [id, want] : expected) {
    const auto& [tokens, reason] = results.at(id);
    ASSERT_TRUE(std::equal(want.prompt.begin(), want.prompt.end(), tokens.begin())) << "seq " << id;
    const int generated = static_cast<int>(tokens.size() - want.prompt.size());
    for (int k = 0; k < generated; ++k) {
      ASSERT_EQ(tokens[want.prompt.size() + k], model_token(id, static_cast<int>(want.prompt.size()) + k));
    }
    if (aborted.contains(id)) {
      EXPECT_EQ(reason, FinishReason::Abort);
      EXPECT_LE(generated, want.num_tokens);
    } else {
      EXPECT_EQ(reason, FinishReason::Length) << "seq " << id;
      EXPECT_EQ(generated, want.num_tokens) << "seq " << id;
    }
  }
  RecordProperty("steps", steps);
  RecordProperty("preemptions", static_cast<int>(scheduler.num_preemptions()));
  std::cout << "[ stats    ] " << steps << " steps, " << scheduler.num_preemptions() << " preemptions, "
            << aborted.size() << " aborted, " << cached_tokens << " tokens from the prefix cache\n";
  if (c.prefix_caching) {
    EXPECT_GT(cached_tokens, 0);
  } else {
    EXPECT_EQ(cached_tokens, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(TinyCaches, SchedulerSimulation,
                         ::testing::Combine(::testing::Values(SimulationCase{16, 12, 64, 6, 128, true, 0.0, 1},
                                                              SimulationCase{16, 12, 64, 6, 128, false, 0.0, 2},
                                                              SimulationCase{16, 30, 37, 5, 90, true, 0.0, 3},
                                                              SimulationCase{16, 9, 1, 3, 150, true, 0.0,
                                                                             4},  // one token per step
                                                              SimulationCase{32, 8, 100, 4, 256, true, 0.0, 5},
                                                              SimulationCase{64, 5, 500, 16, 512, true, 0.0, 6},
                                                              SimulationCase{256, 3, 300, 8, 700, true, 0.0, 7},
                                                              SimulationCase{16, 12, 48, 6, 128, true, 0.05, 8},
                                                              SimulationCase{16, 20, 29, 32, 60, true, 0.05, 9},
                                                              SimulationCase{16, 7, 1000, 64, 2000, true, 0.0, 10}),
                                            ::testing::Values(StepPolicy::DecodeFirst, StepPolicy::PrefillFirst)),
                         [](const ::testing::TestParamInfo<std::tuple<SimulationCase, StepPolicy>>& info) {
                           std::ostringstream name;
                           name << "case" << info.index / 2 << "_" << test::step_policy_name(std::get<1>(info.param));
                           return name.str();
                         });

}  // namespace
}  // namespace nanovllm
