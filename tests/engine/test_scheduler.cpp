#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <span>

#include "common/error.h"
#include "engine/scheduler.h"
#include "test_util.h"

namespace nanovllm {
namespace {

using test::fake_next_token;
using test::params_with;
using test::random_tokens;
using test::small_config;

constexpr int32_t kEos = 7;

std::vector<int32_t> fake_samples(const ScheduledBatch& batch) {
  std::vector<int32_t> sampled;
  for (const auto& item : batch.items) {
    if (item.samples) sampled.push_back(fake_next_token(item.seq->seq_id, item.seq->size()));
  }
  return sampled;
}

std::span<const ScheduledSequence> decode_rows(const ScheduledBatch& batch) {
  return std::span(batch.items).first(batch.num_decode_rows);
}

std::span<const ScheduledSequence> prefill_rows(const ScheduledBatch& batch) {
  return std::span(batch.items).subspan(batch.num_decode_rows);
}

// schedule + fake model + postprocess.
ScheduledBatch step(Scheduler& scheduler) {
  ScheduledBatch batch = scheduler.schedule();
  scheduler.postprocess(batch, fake_samples(batch));
  return batch;
}

// One step in which every sampling sequence draws `token`.
ScheduledBatch step_sampling(Scheduler& scheduler, int32_t token) {
  ScheduledBatch batch = scheduler.schedule();
  std::vector<int32_t> sampled(batch.num_samples(), token);
  scheduler.postprocess(batch, sampled);
  return batch;
}

// Steps until every sequence finished; a bound turns a livelock into a failure.
void run_to_completion(Scheduler& scheduler, int max_steps = 10000) {
  for (int steps = 0; !scheduler.is_finished(); ++steps) {
    ASSERT_LT(steps, max_steps) << "no progress";
    step(scheduler);
  }
}

Sequence* add(Scheduler& scheduler, int64_t id, std::vector<int32_t> prompt, SamplingParams params) {
  scheduler.add(std::make_unique<Sequence>(id, std::move(prompt), std::move(params)));
  return scheduler.find(id);
}

TEST(Scheduler, PrefillThenDecode) {
  std::mt19937 rng(1);
  Scheduler scheduler(small_config(16, 256, 8, 1024), 32, {kEos});
  Sequence* seq = add(scheduler, 1, random_tokens(rng, 21), params_with(3));
  EXPECT_FALSE(scheduler.is_finished());
  EXPECT_EQ(scheduler.num_waiting(), 1);

  ScheduledBatch prefill = scheduler.schedule();
  ASSERT_TRUE(prefill.has_prefill());
  ASSERT_EQ(prefill.items.size(), 1u);
  EXPECT_EQ(prefill.items[0].seq, seq);
  EXPECT_EQ(prefill.items[0].num_new_tokens, 21);
  EXPECT_TRUE(prefill.items[0].samples);
  EXPECT_EQ(prefill.num_tokens, 21);
  EXPECT_EQ(seq->status, SequenceStatus::Running);
  EXPECT_EQ(seq->block_table.size(), 2u);
  scheduler.postprocess(prefill, std::vector<int32_t>{fake_next_token(1, 21)});
  EXPECT_EQ(seq->size(), 22);
  EXPECT_EQ(seq->num_computed_tokens, 21);
  EXPECT_EQ(scheduler.num_running(), 1);

  ScheduledBatch decode = scheduler.schedule();
  ASSERT_FALSE(decode.has_prefill());
  ASSERT_EQ(decode.items.size(), 1u);
  EXPECT_EQ(decode.items[0].num_new_tokens, 1);
  EXPECT_TRUE(decode.items[0].samples);
  EXPECT_EQ(decode.num_tokens, 1);
  scheduler.postprocess(decode, fake_samples(decode));
  EXPECT_EQ(seq->num_computed_tokens, 22);
  step(scheduler);
  EXPECT_TRUE(scheduler.is_finished());
  auto finished = scheduler.take_finished();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0], seq);
  EXPECT_EQ(seq->finish_reason, FinishReason::Length);
  EXPECT_EQ(seq->num_completion_tokens(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(seq->completion_token_ids()[i], fake_next_token(1, 21 + i));
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 32);
  EXPECT_TRUE(scheduler.take_finished().empty());
  scheduler.release(1);
  EXPECT_EQ(scheduler.find(1), nullptr);
}

TEST(Scheduler, ContinuousBatchingUnderMaxNumSeqsPrefillFirst) {
  std::mt19937 rng(2);
  Scheduler scheduler(small_config(16, 1024, 2, 1024, StepPolicy::PrefillFirst), 64, {kEos});
  add(scheduler, 1, random_tokens(rng, 10), params_with(2));
  add(scheduler, 2, random_tokens(rng, 11), params_with(4));
  add(scheduler, 3, random_tokens(rng, 12), params_with(4));
  add(scheduler, 4, random_tokens(rng, 13), params_with(4));

  ScheduledBatch b1 = step(scheduler);  // admits 1 and 2 only: at most 2 sequences run
  ASSERT_TRUE(b1.has_prefill());
  ASSERT_EQ(b1.items.size(), 2u);
  EXPECT_EQ(b1.items[0].seq->seq_id, 1);
  EXPECT_EQ(b1.items[1].seq->seq_id, 2);
  EXPECT_EQ(scheduler.num_waiting(), 2);
  EXPECT_EQ(scheduler.num_running(), 2);

  ScheduledBatch b2 = step(scheduler);  // decode both; 1 reaches max_tokens = 2
  ASSERT_FALSE(b2.has_prefill());
  EXPECT_EQ(b2.items.size(), 2u);
  ASSERT_EQ(scheduler.take_finished().size(), 1u);
  EXPECT_EQ(scheduler.num_running(), 1);

  ScheduledBatch b3 = step(scheduler);  // a slot is free: 3 is admitted, decoding waits one step
  ASSERT_TRUE(b3.has_prefill());
  ASSERT_EQ(b3.items.size(), 1u);
  EXPECT_EQ(b3.items[0].seq->seq_id, 3);
  EXPECT_EQ(b3.items[0].num_new_tokens, 12);

  ScheduledBatch b4 = step(scheduler);
  ASSERT_FALSE(b4.has_prefill());
  ASSERT_EQ(b4.items.size(), 2u);
  EXPECT_EQ(b4.items[0].seq->seq_id, 2);  // oldest first
  EXPECT_EQ(b4.items[1].seq->seq_id, 3);

  int steps = 0;
  while (!scheduler.is_finished() && steps++ < 100) {
    ScheduledBatch batch = step(scheduler);
    EXPECT_LE(static_cast<int>(batch.items.size()), 2);
  }
  EXPECT_TRUE(scheduler.is_finished());
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 64);
}

TEST(Scheduler, TokenBudgetChunksTheLastAdmittedPromptPrefillFirst) {
  std::mt19937 rng(3);
  Scheduler scheduler(small_config(16, 32, 8, 1024, StepPolicy::PrefillFirst), 64, {kEos});
  for (int id = 1; id <= 4; ++id) add(scheduler, id, random_tokens(rng, 10), params_with(2));

  ScheduledBatch b1 = step(scheduler);
  ASSERT_TRUE(b1.has_prefill());
  ASSERT_EQ(b1.items.size(), 4u);
  EXPECT_EQ(b1.num_tokens, 32);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(b1.items[i].num_new_tokens, 10);
    EXPECT_TRUE(b1.items[i].samples);
  }
  EXPECT_EQ(b1.items[3].num_new_tokens, 2);  // what is left of the budget
  EXPECT_FALSE(b1.items[3].samples);
  Sequence* fourth = scheduler.find(4);
  EXPECT_EQ(fourth->num_computed_tokens, 2);
  EXPECT_EQ(fourth->size(), 10);  // no token sampled for a partial prefill

  ScheduledBatch b2 = step(scheduler);  // the rest of 4 before any decoding
  ASSERT_TRUE(b2.has_prefill());
  ASSERT_EQ(b2.items.size(), 1u);
  EXPECT_EQ(b2.items[0].seq, fourth);
  EXPECT_EQ(b2.items[0].num_new_tokens, 8);
  EXPECT_TRUE(b2.items[0].samples);
  EXPECT_EQ(fourth->size(), 11);

  ScheduledBatch b3 = step(scheduler);
  ASSERT_FALSE(b3.has_prefill());
  EXPECT_EQ(b3.items.size(), 4u);
}

TEST(Scheduler, ChunkedPrefillOfALongPromptBlocksDecodingPrefillFirst) {
  std::mt19937 rng(4);
  Scheduler scheduler(small_config(16, 64, 8, 1024, StepPolicy::PrefillFirst), 64, {kEos});
  Sequence* short_seq = add(scheduler, 1, random_tokens(rng, 5), params_with(10));
  const auto long_prompt = random_tokens(rng, 200);
  Sequence* long_seq = add(scheduler, 2, long_prompt, params_with(3));

  ScheduledBatch b1 = step(scheduler);
  ASSERT_TRUE(b1.has_prefill());
  ASSERT_EQ(b1.items.size(), 2u);
  EXPECT_EQ(b1.items[0].num_new_tokens, 5);
  EXPECT_TRUE(b1.items[0].samples);
  EXPECT_EQ(b1.items[1].num_new_tokens, 59);
  EXPECT_FALSE(b1.items[1].samples);
  EXPECT_EQ(long_seq->block_table.size(), 13u);  // blocks for all 200 tokens at admission
  EXPECT_EQ(scheduler.num_running(), 2);

  int computed = 59;
  for (int expected : {64, 64, 13}) {
    ScheduledBatch batch = step(scheduler);
    ASSERT_TRUE(batch.has_prefill()) << "no decoding while a prefill is unfinished";
    ASSERT_EQ(batch.items.size(), 1u);
    EXPECT_EQ(batch.items[0].seq, long_seq);
    EXPECT_EQ(batch.items[0].num_new_tokens, expected);
    EXPECT_EQ(batch.items[0].samples, computed + expected == 200);
    computed += expected;
    EXPECT_EQ(long_seq->num_computed_tokens, computed);
  }
  EXPECT_EQ(long_seq->size(), 201);
  EXPECT_EQ(short_seq->size(), 6);

  ScheduledBatch decode = step(scheduler);
  ASSERT_FALSE(decode.has_prefill());
  EXPECT_EQ(decode.items.size(), 2u);
  EXPECT_EQ(long_seq->completion_token_ids()[0], fake_next_token(2, 200));

  // The long prompt's blocks were registered chunk by chunk: a copy of it hits all 12 full blocks.
  Sequence* copy = add(scheduler, 3, long_prompt, params_with(1));
  ScheduledBatch b = scheduler.schedule();
  ASSERT_TRUE(b.has_prefill());
  EXPECT_EQ(copy->num_cached_tokens, 192);
  EXPECT_EQ(b.items[0].num_new_tokens, 8);
  scheduler.postprocess(b, fake_samples(b));
}

// Decode-first (vLLM V1): every running sequence decodes one token, oldest first, then prompts fill the rest
// of the budget: several may be admitted, the last one cut; the cut one continues next step after the decodes.
TEST(Scheduler, DecodeFirstMixesDecodeRowsAndPromptChunks) {
  std::mt19937 rng(22);
  Scheduler scheduler(small_config(16, 32, 8, 1024, StepPolicy::DecodeFirst), 64, {kEos});
  add(scheduler, 1, random_tokens(rng, 10), params_with(20));
  add(scheduler, 2, random_tokens(rng, 10), params_with(20));
  ScheduledBatch b1 = step(scheduler);
  EXPECT_EQ(b1.num_decode_rows, 0);
  EXPECT_EQ(b1.num_tokens, 20);

  add(scheduler, 3, random_tokens(rng, 8), params_with(20));
  add(scheduler, 4, random_tokens(rng, 8), params_with(20));
  Sequence* fifth = add(scheduler, 5, random_tokens(rng, 20), params_with(20));
  ScheduledBatch b2 = step(scheduler);
  ASSERT_TRUE(b2.has_prefill());
  ASSERT_EQ(b2.num_decode_rows, 2);
  ASSERT_EQ(b2.items.size(), 5u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(b2.items[i].seq->seq_id, i + 1);
    EXPECT_EQ(b2.items[i].num_new_tokens, 1);
    EXPECT_TRUE(b2.items[i].samples);
  }
  EXPECT_EQ(b2.items[2].seq->seq_id, 3);
  EXPECT_EQ(b2.items[2].num_new_tokens, 8);
  EXPECT_EQ(b2.items[3].seq->seq_id, 4);
  EXPECT_EQ(b2.items[3].num_new_tokens, 8);
  EXPECT_EQ(b2.items[4].seq, fifth);
  EXPECT_EQ(b2.items[4].num_new_tokens, 14);  // 32 - 2 decodes - 16: cut
  EXPECT_FALSE(b2.items[4].samples);
  EXPECT_EQ(b2.num_tokens, 32);
  EXPECT_EQ(scheduler.num_running(), 5);

  Sequence* sixth = add(scheduler, 6, random_tokens(rng, 5), params_with(20));
  ScheduledBatch b3 = step(scheduler);  // 1..4 decode, the rest of 5, then 6 is admitted
  ASSERT_EQ(b3.num_decode_rows, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b3.items[i].seq->seq_id, i + 1);
  ASSERT_EQ(b3.items.size(), 6u);
  EXPECT_EQ(b3.items[4].seq, fifth);
  EXPECT_EQ(b3.items[4].num_new_tokens, 6);
  EXPECT_TRUE(b3.items[4].samples);
  EXPECT_EQ(b3.items[5].seq, sixth);
  EXPECT_EQ(b3.items[5].num_new_tokens, 5);
  EXPECT_EQ(b3.num_tokens, 15);

  ScheduledBatch b4 = step(scheduler);
  EXPECT_FALSE(b4.has_prefill());
  EXPECT_EQ(b4.num_decode_rows, 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b4.items[i].seq->seq_id, i + 1);  // oldest first
}

// Three sequences decode while a 1,091-token prompt arrives (budget 256). Decode-first: each of the five steps
// of its prefill also gives every running sequence a token. Prefill-first: five steps without a decode token.
TEST(Scheduler, LongPromptStallsRunningSequencesOnlyUnderPrefillFirst) {
  struct StepShape {
    int decode_rows, prefill_tokens;
    bool operator==(const StepShape&) const = default;
  };
  auto run = [](StepPolicy policy) {
    std::mt19937 rng(23);
    Scheduler scheduler(small_config(16, 256, 8, 2048, policy), 200, {kEos});
    std::vector<Sequence*> running;
    for (int id = 1; id <= 3; ++id) running.push_back(add(scheduler, id, random_tokens(rng, 20), params_with(100)));
    step(scheduler);
    Sequence* long_seq = add(scheduler, 4, random_tokens(rng, 1091), params_with(5));
    std::vector<StepShape> shapes;
    while (long_seq->num_completion_tokens() == 0) {
      std::vector<int> sizes;
      for (Sequence* seq : running) sizes.push_back(seq->size());
      ScheduledBatch batch = step(scheduler);
      int prefill_tokens = 0;
      for (const auto& item : prefill_rows(batch)) {
        EXPECT_EQ(item.seq, long_seq);
        prefill_tokens += item.num_new_tokens;
      }
      for (size_t i = 0; i < decode_rows(batch).size(); ++i) {
        EXPECT_EQ(batch.items[i].seq, running[i]);  // oldest first
        EXPECT_EQ(running[i]->size(), sizes[i] + 1);
      }
      shapes.push_back({batch.num_decode_rows, prefill_tokens});
      if (shapes.size() > 10) break;
    }
    return shapes;
  };
  const std::vector<StepShape> decode_first = {{3, 253}, {3, 253}, {3, 253}, {3, 253}, {3, 79}};
  const std::vector<StepShape> prefill_first = {{0, 256}, {0, 256}, {0, 256}, {0, 256}, {0, 67}};
  EXPECT_TRUE(run(StepPolicy::DecodeFirst) == decode_first);
  EXPECT_TRUE(run(StepPolicy::PrefillFirst) == prefill_first);
}

// A decode that needs a KV block when none is free preempts the partly prefilled sequence (the newest), not a
// running one; re-admitted later, it skips its computed full block through the prefix cache.
TEST(Scheduler, DecodeFirstPreemptsThePrefillingSequenceFirst) {
  std::mt19937 rng(24);
  // 6 blocks of 16: A (16 tokens) and B (8) take one block each, P (64) the other four.
  Scheduler scheduler(small_config(16, 40, 8, 1024, StepPolicy::DecodeFirst), 6, {kEos});
  Sequence* a = add(scheduler, 1, random_tokens(rng, 16), params_with(4));
  Sequence* b = add(scheduler, 2, random_tokens(rng, 8), params_with(4));
  Sequence* p = add(scheduler, 3, random_tokens(rng, 64), params_with(2));
  ScheduledBatch b1 = step(scheduler);
  ASSERT_EQ(b1.items.size(), 3u);
  ASSERT_EQ(p->num_computed_tokens, 16);  // one full block, registered in the prefix cache
  ASSERT_EQ(scheduler.block_manager().num_free_blocks(), 0);

  ScheduledBatch b2 = step(scheduler);  // A's next token needs a second block
  EXPECT_EQ(scheduler.num_preemptions(), 1);
  EXPECT_EQ(p->status, SequenceStatus::Waiting);
  EXPECT_TRUE(p->block_table.empty());
  EXPECT_FALSE(b2.has_prefill());  // P does not fit again yet
  ASSERT_EQ(b2.num_decode_rows, 2);
  EXPECT_EQ(b2.items[0].seq, a);
  EXPECT_EQ(b2.items[1].seq, b);
  EXPECT_EQ(scheduler.num_waiting(), 1);

  bool readmitted = false;
  for (int steps = 0; !scheduler.is_finished() && steps < 100; ++steps) {
    ScheduledBatch batch = scheduler.schedule();
    for (const auto& item : prefill_rows(batch)) {
      if (item.seq != p || readmitted) continue;
      readmitted = true;
      EXPECT_EQ(p->num_cached_tokens, 16);
      EXPECT_EQ(p->num_computed_tokens, 16);
    }
    scheduler.postprocess(batch, fake_samples(batch));
  }
  EXPECT_TRUE(readmitted);
  EXPECT_EQ(scheduler.num_preemptions(), 1);
  for (Sequence* seq : {a, b, p}) {
    EXPECT_EQ(seq->finish_reason, FinishReason::Length);
    for (int k = 0; k < seq->num_completion_tokens(); ++k)
      EXPECT_EQ(seq->completion_token_ids()[k], fake_next_token(seq->seq_id, seq->num_prompt_tokens + k));
  }
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 6);
}

// A prompt admitted next to a decoding sequence starts after its prefix-cache hit.
TEST(Scheduler, DecodeFirstPrefixCacheHitInAMixedStep) {
  std::mt19937 rng(25);
  Scheduler scheduler(small_config(16, 256, 8, 1024, StepPolicy::DecodeFirst), 32, {kEos});
  const auto prompt = random_tokens(rng, 40);
  Sequence* first = add(scheduler, 1, prompt, params_with(10));
  step(scheduler);  // blocks 0 and 1 of the prompt are computed and registered
  std::vector<int32_t> shared(prompt.begin(), prompt.begin() + 32);
  Sequence* second = add(scheduler, 2, test::concat(shared, random_tokens(rng, 8)), params_with(10));
  ScheduledBatch batch = step(scheduler);
  ASSERT_EQ(batch.items.size(), 2u);
  EXPECT_EQ(batch.num_decode_rows, 1);
  EXPECT_EQ(batch.items[0].seq, first);
  EXPECT_EQ(batch.items[1].seq, second);
  EXPECT_EQ(second->num_cached_tokens, 32);
  EXPECT_EQ(batch.items[1].num_new_tokens, 8);
  EXPECT_TRUE(batch.items[1].samples);
  EXPECT_EQ(batch.num_tokens, 9);
  EXPECT_EQ(second->block_table[0], first->block_table[0]);
  EXPECT_EQ(second->block_table[1], first->block_table[1]);
}

// max_num_seqs counts decoding and prefilling sequences alike: a step admits only up to it, and the decodes
// that fill the budget leave prompts waiting.
TEST(Scheduler, DecodeFirstAdmitsWithinMaxNumSeqsAndTheBudget) {
  std::mt19937 rng(26);
  Scheduler scheduler(small_config(16, 1024, 3, 1024, StepPolicy::DecodeFirst), 64, {kEos});
  add(scheduler, 1, random_tokens(rng, 10), params_with(2));
  add(scheduler, 2, random_tokens(rng, 10), params_with(10));
  step(scheduler);
  for (int id = 3; id <= 5; ++id) add(scheduler, id, random_tokens(rng, 10), params_with(10));
  ScheduledBatch b2 = step(scheduler);  // 1 and 2 decode (1 finishes), one slot is left: 3 only
  ASSERT_EQ(b2.num_decode_rows, 2);
  ASSERT_EQ(b2.items.size(), 3u);
  EXPECT_EQ(b2.items[2].seq->seq_id, 3);
  EXPECT_EQ(scheduler.num_waiting(), 2);
  scheduler.take_finished();
  ScheduledBatch b3 = step(scheduler);  // 1's slot goes to 4
  ASSERT_EQ(b3.num_decode_rows, 2);
  ASSERT_EQ(b3.items.size(), 3u);
  EXPECT_EQ(b3.items[0].seq->seq_id, 2);
  EXPECT_EQ(b3.items[1].seq->seq_id, 3);
  EXPECT_EQ(b3.items[2].seq->seq_id, 4);

  // A budget of 2 tokens and two decoding sequences: the waiting prompt gets nothing until one finishes.
  Scheduler tight(small_config(16, 2, 8, 1024, StepPolicy::DecodeFirst), 64, {kEos});
  add(tight, 1, random_tokens(rng, 1), params_with(3));
  add(tight, 2, random_tokens(rng, 1), params_with(5));
  ASSERT_EQ(step(tight).items.size(), 2u);
  Sequence* waiting = add(tight, 3, random_tokens(rng, 4), params_with(1));
  for (int i = 0; i < 2; ++i) {
    ScheduledBatch batch = step(tight);
    EXPECT_FALSE(batch.has_prefill()) << "step " << i;
    EXPECT_EQ(batch.num_decode_rows, 2);
  }
  EXPECT_EQ(waiting->status, SequenceStatus::Waiting);
  ScheduledBatch after = step(tight);  // 1 finished: one decode, one prompt token
  EXPECT_EQ(after.num_decode_rows, 1);
  ASSERT_EQ(after.items.size(), 2u);
  EXPECT_EQ(after.items[1].seq, waiting);
  EXPECT_EQ(after.items[1].num_new_tokens, 1);
  EXPECT_FALSE(after.items[1].samples);
}

TEST(Scheduler, PromptLongerThanTheBudgetWithOthersWaiting) {
  std::mt19937 rng(5);
  Scheduler scheduler(small_config(16, 16, 8, 1024), 64, {kEos});
  add(scheduler, 1, random_tokens(rng, 40), params_with(1));
  add(scheduler, 2, random_tokens(rng, 3), params_with(1));
  std::vector<std::pair<int64_t, int>> chunks;
  for (int steps = 0; !scheduler.is_finished() && steps < 100; ++steps) {
    ScheduledBatch batch = step(scheduler);
    for (const auto& item : batch.items) chunks.emplace_back(item.seq->seq_id, item.num_new_tokens);
  }
  // 1 is chunked 16 + 16 + 8, then 2 joins the step in which 1's prefill completes.
  const std::vector<std::pair<int64_t, int>> expected = {{1, 16}, {1, 16}, {1, 8}, {2, 3}};
  EXPECT_EQ(chunks, expected);
}

// Behaviour both step policies share.
class SchedulerUnderEachPolicy : public ::testing::TestWithParam<StepPolicy> {};

INSTANTIATE_TEST_SUITE_P(Policies, SchedulerUnderEachPolicy,
                         ::testing::Values(StepPolicy::DecodeFirst, StepPolicy::PrefillFirst),
                         [](const ::testing::TestParamInfo<StepPolicy>& info) {
                           return test::step_policy_name(info.param);
                         });

TEST_P(SchedulerUnderEachPolicy, PreemptsTheNewestAndRecomputesIt) {
  std::mt19937 rng(6);
  // 6 blocks of 16: three sequences of 20-token prompts (2 blocks each) fill the cache; growing past 32 tokens
  // needs a third block each.
  Scheduler scheduler(small_config(16, 1024, 8, 1024, GetParam()), 6, {kEos});
  std::vector<Sequence*> seqs;
  std::vector<std::vector<int32_t>> prompts;
  for (int id = 1; id <= 3; ++id) {
    prompts.push_back(random_tokens(rng, 20));
    seqs.push_back(add(scheduler, id, prompts.back(), params_with(30)));
  }
  bool saw_recompute = false;
  int steps = 0;
  while (!scheduler.is_finished() && steps++ < 1000) {
    ScheduledBatch batch = scheduler.schedule();
    ASSERT_FALSE(batch.empty());
    for (const auto& item : prefill_rows(batch)) {
      // A re-admitted sequence prefills its prompt and the tokens generated so far again.
      if (item.seq->num_completion_tokens() > 0) {
        saw_recompute = true;
        EXPECT_EQ(item.num_new_tokens, item.seq->size() - item.seq->num_cached_tokens);
        EXPECT_TRUE(item.samples);
      }
    }
    scheduler.postprocess(batch, fake_samples(batch));
    EXPECT_LE(scheduler.block_manager().num_free_blocks(), 6);
  }
  ASSERT_TRUE(scheduler.is_finished());
  EXPECT_GT(scheduler.num_preemptions(), 0);
  EXPECT_TRUE(saw_recompute);
  for (int i = 0; i < 3; ++i) {
    Sequence* seq = seqs[i];
    EXPECT_EQ(seq->finish_reason, FinishReason::Length);
    ASSERT_EQ(seq->num_completion_tokens(), 30);
    EXPECT_TRUE(std::equal(prompts[i].begin(), prompts[i].end(), seq->token_ids.begin()));
    for (int k = 0; k < 30; ++k) EXPECT_EQ(seq->completion_token_ids()[k], fake_next_token(seq->seq_id, 20 + k));
  }
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 6);
}

TEST_P(SchedulerUnderEachPolicy, PreemptedSequenceGoesBackToTheFrontOfWaiting) {
  std::mt19937 rng(7);
  // 4 blocks: 1 and 2 take 2 blocks each (prompts of 32); at 33 tokens both need a third block.
  Scheduler scheduler(small_config(16, 1024, 8, 1024, GetParam()), 4, {kEos});
  add(scheduler, 1, random_tokens(rng, 32), params_with(20));
  add(scheduler, 2, random_tokens(rng, 32), params_with(20));
  add(scheduler, 3, random_tokens(rng, 40), params_with(3));
  step(scheduler);  // prefill 1 and 2 (3 does not fit)
  EXPECT_EQ(scheduler.num_running(), 2);
  EXPECT_EQ(scheduler.num_waiting(), 1);
  ScheduledBatch decode = step(scheduler);  // 1 needs a block: 2 (the newest) is preempted
  ASSERT_FALSE(decode.has_prefill());
  ASSERT_EQ(decode.items.size(), 1u);
  EXPECT_EQ(decode.items[0].seq->seq_id, 1);
  EXPECT_EQ(scheduler.num_preemptions(), 1);
  Sequence* second = scheduler.find(2);
  EXPECT_EQ(second->status, SequenceStatus::Waiting);
  EXPECT_TRUE(second->block_table.empty());
  EXPECT_EQ(second->num_computed_tokens, 0);
  EXPECT_EQ(scheduler.num_waiting(), 2);
  // 1 keeps decoding; when 1 finishes, 2 comes back before 3.
  std::vector<int64_t> admitted;
  for (int steps = 0; !scheduler.is_finished() && steps < 1000; ++steps) {
    ScheduledBatch batch = step(scheduler);
    for (const auto& item : prefill_rows(batch)) admitted.push_back(item.seq->seq_id);
  }
  ASSERT_GE(admitted.size(), 2u);
  EXPECT_EQ(admitted[0], 2);
  EXPECT_EQ(scheduler.find(2)->num_completion_tokens(), 20);
  EXPECT_EQ(scheduler.find(3)->num_completion_tokens(), 3);
}

TEST(Scheduler, StopsAtEos) {
  std::mt19937 rng(8);
  Scheduler scheduler(small_config(16, 1024, 8, 1024), 16, {kEos, 8});
  Sequence* seq = add(scheduler, 1, random_tokens(rng, 9), params_with(10, /*ignore_eos=*/false));
  step(scheduler);
  step_sampling(scheduler, 8);  // the second EOS id
  EXPECT_TRUE(scheduler.is_finished());
  EXPECT_EQ(seq->finish_reason, FinishReason::Stop);
  EXPECT_EQ(seq->num_completion_tokens(), 2);
  EXPECT_EQ(seq->last_token(), 8);
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 16);
}

TEST(Scheduler, IgnoreEosRunsToMaxTokens) {
  std::mt19937 rng(9);
  Scheduler scheduler(small_config(16, 1024, 8, 1024), 16, {kEos});
  Sequence* seq = add(scheduler, 1, random_tokens(rng, 9), params_with(4, /*ignore_eos=*/true));
  for (int steps = 0; !scheduler.is_finished() && steps < 100; ++steps) step_sampling(scheduler, kEos);
  EXPECT_EQ(seq->finish_reason, FinishReason::Length);
  EXPECT_EQ(seq->num_completion_tokens(), 4);
}

TEST(Scheduler, MinTokensDelaysEosAndStopTokens) {
  std::mt19937 rng(10);
  Scheduler scheduler(small_config(16, 1024, 8, 1024), 16, {kEos});
  SamplingParams params = params_with(10, /*ignore_eos=*/false);
  params.min_tokens = 3;
  params.stop_token_ids = {55};
  Sequence* seq = add(scheduler, 1, random_tokens(rng, 9), params);
  step_sampling(scheduler, kEos);  // completion token 1: too early
  step_sampling(scheduler, 55);    // 2: too early
  EXPECT_FALSE(scheduler.is_finished());
  step_sampling(scheduler, 55);  // 3: counts
  EXPECT_TRUE(scheduler.is_finished());
  EXPECT_EQ(seq->finish_reason, FinishReason::Stop);
  EXPECT_EQ(seq->num_completion_tokens(), 3);
}

TEST(Scheduler, StopTokenIdsStopEvenWithIgnoreEos) {
  std::mt19937 rng(11);
  Scheduler scheduler(small_config(16, 1024, 8, 1024), 16, {kEos});
  SamplingParams params = params_with(10, /*ignore_eos=*/true);
  params.stop_token_ids = {55, 56};
  Sequence* seq = add(scheduler, 1, random_tokens(rng, 9), params);
  step_sampling(scheduler, kEos);
  EXPECT_FALSE(scheduler.is_finished());
  step_sampling(scheduler, 56);
  EXPECT_TRUE(scheduler.is_finished());
  EXPECT_EQ(seq->finish_reason, FinishReason::Stop);
  EXPECT_EQ(seq->num_completion_tokens(), 2);
}

TEST(Scheduler, StopWinsOverLengthOnTheSameToken) {
  std::mt19937 rng(12);
  Scheduler scheduler(small_config(16, 1024, 8, 1024), 16, {kEos});
  Sequence* seq = add(scheduler, 1, random_tokens(rng, 9), params_with(1, /*ignore_eos=*/false));
  step_sampling(scheduler, kEos);
  EXPECT_EQ(seq->finish_reason, FinishReason::Stop);
}

TEST(Scheduler, MaxModelLenEndsWithLength) {
  std::mt19937 rng(13);
  Scheduler scheduler(small_config(16, 1024, 8, 24), 16, {kEos});
  Sequence* seq = add(scheduler, 1, random_tokens(rng, 20), params_with(100));
  Sequence* full = add(scheduler, 2, random_tokens(rng, 24), params_with(100));  // exactly max_model_len
  run_to_completion(scheduler);
  EXPECT_EQ(seq->finish_reason, FinishReason::Length);
  EXPECT_EQ(seq->size(), 24);
  EXPECT_EQ(seq->num_completion_tokens(), 4);
  EXPECT_EQ(full->finish_reason, FinishReason::Length);
  EXPECT_EQ(full->num_completion_tokens(), 1);  // as vLLM: a full-length prompt still gets one token
}

TEST(Scheduler, AbortWaitingRunningAndPrefilling) {
  std::mt19937 rng(14);
  Scheduler scheduler(small_config(16, 40, 8, 1024), 32, {kEos});
  Sequence* running = add(scheduler, 1, random_tokens(rng, 20), params_with(50));
  Sequence* prefilling = add(scheduler, 2, random_tokens(rng, 100), params_with(50));
  Sequence* waiting = add(scheduler, 3, random_tokens(rng, 20), params_with(50));
  step(scheduler);
  ASSERT_EQ(running->status, SequenceStatus::Running);
  ASSERT_EQ(prefilling->num_computed_tokens, 20);  // mid-prefill
  ASSERT_EQ(waiting->status, SequenceStatus::Waiting);
  const int free_before = scheduler.block_manager().num_free_blocks();

  scheduler.abort(2);
  EXPECT_EQ(prefilling->status, SequenceStatus::Finished);
  EXPECT_EQ(prefilling->finish_reason, FinishReason::Abort);
  EXPECT_TRUE(prefilling->block_table.empty());
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), free_before + 7);
  scheduler.abort(3);
  EXPECT_EQ(scheduler.num_waiting(), 0);
  EXPECT_EQ(waiting->finish_reason, FinishReason::Abort);

  ScheduledBatch batch = scheduler.schedule();  // only 1 is left: it decodes
  ASSERT_FALSE(batch.has_prefill());
  ASSERT_EQ(batch.items.size(), 1u);
  scheduler.abort(1);  // between schedule() and postprocess(): the result is dropped
  scheduler.postprocess(batch, fake_samples(batch));
  EXPECT_EQ(running->finish_reason, FinishReason::Abort);
  EXPECT_EQ(running->num_completion_tokens(), 1);
  EXPECT_TRUE(scheduler.is_finished());
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 32);
  EXPECT_EQ(scheduler.take_finished().size(), 3u);

  scheduler.abort(1);   // already finished: nothing happens
  scheduler.abort(99);  // unknown: nothing happens
  EXPECT_TRUE(scheduler.take_finished().empty());
  for (int64_t id : {1, 2, 3}) scheduler.release(id);
  EXPECT_TRUE(scheduler.schedule().empty());
}

TEST(Scheduler, FinishForStopStrings) {
  std::mt19937 rng(15);
  Scheduler scheduler(small_config(16, 1024, 8, 1024), 16, {kEos});
  Sequence* seq = add(scheduler, 1, random_tokens(rng, 9), params_with(10));
  Sequence* last = add(scheduler, 2, random_tokens(rng, 9), params_with(1));
  step(scheduler);
  scheduler.finish(1, FinishReason::Stop);
  EXPECT_EQ(seq->status, SequenceStatus::Finished);
  EXPECT_EQ(seq->finish_reason, FinishReason::Stop);
  EXPECT_TRUE(seq->block_table.empty());
  // 2 finished by length in the same step; its last token also completed a stop string.
  EXPECT_EQ(last->finish_reason, FinishReason::Length);
  scheduler.finish(2, FinishReason::Stop);
  EXPECT_EQ(last->finish_reason, FinishReason::Stop);
  EXPECT_EQ(scheduler.take_finished().size(), 2u);
  EXPECT_TRUE(scheduler.is_finished());
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 16);
}

TEST(Scheduler, AddRejectsWhatCouldNeverRun) {
  std::mt19937 rng(16);
  Scheduler scheduler(small_config(16, 1024, 8, 100), 4, {kEos});
  EXPECT_THROW(add(scheduler, 1, {}, params_with(1)), InvalidInput);
  EXPECT_THROW(add(scheduler, 2, random_tokens(rng, 101), params_with(1)), InvalidInput);
  SamplingParams bad = params_with(1);
  bad.top_p = 0.0f;
  EXPECT_THROW(add(scheduler, 3, random_tokens(rng, 5), bad), InvalidInput);
  // 4 blocks of 16 hold 64 tokens: a 60-token prompt with 5 more tokens needs KV for 64: fits.
  EXPECT_NO_THROW(add(scheduler, 4, random_tokens(rng, 60), params_with(5)));
  try {
    add(scheduler, 5, random_tokens(rng, 60), params_with(6));  // 65 tokens of KV: 5 blocks
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("5 KV cache blocks"), std::string::npos) << message;
    EXPECT_NE(message.find("only 4 blocks"), std::string::npos) << message;
  }
  // max_model_len caps the length, so a huge max_tokens is fine when max_model_len fits.
  Scheduler roomy(small_config(16, 1024, 8, 64), 4, {kEos});
  EXPECT_NO_THROW(add(roomy, 6, random_tokens(rng, 10), params_with(100000)));
  EXPECT_THROW(add(roomy, 6, random_tokens(rng, 10), params_with(1)), EngineError);  // id in use
  EXPECT_EQ(scheduler.num_waiting(), 1);
}

TEST(Scheduler, ReleaseRequiresAFinishedSequence) {
  std::mt19937 rng(17);
  Scheduler scheduler(small_config(16, 1024, 8, 1024), 16, {kEos});
  add(scheduler, 1, random_tokens(rng, 9), params_with(3));
  EXPECT_THROW(scheduler.release(1), EngineError);
  scheduler.abort(1);
  scheduler.release(1);  // before take_finished: it is dropped from the finished list too
  EXPECT_TRUE(scheduler.take_finished().empty());
  EXPECT_EQ(scheduler.find(1), nullptr);
}

TEST(Scheduler, PostprocessChecksTheSampleCount) {
  std::mt19937 rng(18);
  Scheduler scheduler(small_config(16, 1024, 8, 1024), 16, {kEos});
  add(scheduler, 1, random_tokens(rng, 9), params_with(3));
  ScheduledBatch batch = scheduler.schedule();
  EXPECT_THROW(scheduler.postprocess(batch, std::vector<int32_t>{}), EngineError);
}

TEST(Scheduler, DecodeBatchIsBoundedByTheTokenBudget) {
  std::mt19937 rng(19);
  // max_num_batched_tokens below max_num_seqs: a decode step still computes at most 3 tokens, and every
  // sequence gets its turn.
  Scheduler scheduler(small_config(16, 3, 8, 1024), 64, {kEos});
  for (int id = 1; id <= 5; ++id) add(scheduler, id, random_tokens(rng, 2), params_with(4));
  int steps = 0;
  while (!scheduler.is_finished() && steps++ < 200) {
    ScheduledBatch batch = step(scheduler);
    EXPECT_LE(batch.num_tokens, 3);
  }
  ASSERT_TRUE(scheduler.is_finished());
  for (int id = 1; id <= 5; ++id) EXPECT_EQ(scheduler.find(id)->num_completion_tokens(), 4);
}

TEST(Scheduler, AbortMidPrefillLeavesOnlyComputedBlocksInTheCache) {
  std::mt19937 rng(20);
  Scheduler scheduler(small_config(16, 40, 8, 1024), 32, {kEos});
  const auto prompt = random_tokens(rng, 100);
  add(scheduler, 1, prompt, params_with(5));
  step(scheduler);  // 40 of 100 tokens: blocks 0 and 1 are complete, the other 5 hold nothing yet
  step(scheduler);  // 80 tokens: blocks 0..4 complete
  scheduler.abort(1);
  Sequence* again = add(scheduler, 2, prompt, params_with(5));
  ScheduledBatch batch = scheduler.schedule();
  EXPECT_EQ(again->num_cached_tokens, 80);  // not 96: block 5 was allocated but never written
  EXPECT_EQ(batch.items[0].num_new_tokens, 20);
  scheduler.postprocess(batch, fake_samples(batch));
  run_to_completion(scheduler);
  EXPECT_EQ(again->num_completion_tokens(), 5);
}

TEST(Scheduler, ScheduleIsEmptyOnlyWhenFinished) {
  std::mt19937 rng(21);
  Scheduler scheduler(small_config(16, 64, 8, 1024), 8, {kEos});
  EXPECT_TRUE(scheduler.schedule().empty());
  add(scheduler, 1, random_tokens(rng, 30), params_with(2));
  EXPECT_FALSE(scheduler.schedule().empty());
}

}  // namespace
}  // namespace nanovllm
