// Asynchronous scheduling (EngineConfig::async_scheduling): a decode step's successor launched before the step's
// ids reach the host changes nothing a request gets. The same scripted run, with arrivals, an abort, stop tokens,
// min_tokens, logprobs, prefix-cache hits and sequences ending at different steps, must give every request the same
// tokens and finish reason with and without it, and with it some steps must have been launched early.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "engine/llm_engine.h"
#include "tiny_model.h"

namespace nanovllm {
namespace {

struct ScriptedRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
  int add_at_step = 0;
  int abort_at_step = -1;
};

struct Outcome {
  std::vector<int64_t> ids;  // the script's requests' ids, in script order
  std::map<int64_t, RequestOutput> outputs;
  int steps = 0;
  std::vector<bool> early;      // per step: launched during the one before
  std::vector<bool> mixed;      // per step: decode rows and prompt chunks
  std::map<int64_t, int> done;  // request id -> the step that returned its output
  int early_steps() const { return static_cast<int>(std::count(early.begin(), early.end(), true)); }
};

EngineConfig config(bool async_scheduling) {
  EngineConfig c = test::tiny_config();
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;  // longer prompts prefill in chunks beside decode rows
  c.async_scheduling = async_scheduling;
  return c;
}

Outcome run(bool async_scheduling, const std::vector<ScriptedRequest>& script) {
  LLMEngine engine(config(async_scheduling));
  Outcome o;
  std::vector<int64_t>& ids = o.ids;
  ids.assign(script.size(), -1);
  for (int step = 0;; ++step) {
    bool adds_left = false;
    for (size_t i = 0; i < script.size(); ++i) {
      if (script[i].add_at_step == step)
        ids[i] = engine.add_request(Prompt::from_tokens(script[i].prompt), script[i].params);
      if (script[i].abort_at_step == step && ids[i] >= 0) engine.abort(ids[i]);
      adds_left = adds_left || script[i].add_at_step > step;
    }
    if (engine.is_finished() && !adds_left) break;
    for (RequestOutput& out : engine.step()) {
      o.done[out.request_id] = o.steps;
      o.outputs[out.request_id] = std::move(out);
    }
    const StepStats& stats = engine.last_step();
    o.early.push_back(stats.launched_early);
    o.mixed.push_back(stats.is_prefill && stats.num_decode_rows > 0);
    ++o.steps;
  }
  return o;
}

// The same tokens with logprobs within float rounding: prompt chunks that ran beside decode rows synchronously run
// alone when an early step computed those rows, and the CPU's sums differ in the last bits with the batch.
void expect_close(const std::optional<std::vector<PositionLogprobs>>& got,
                  const std::optional<std::vector<PositionLogprobs>>& expected, int64_t id) {
  ASSERT_EQ(got.has_value(), expected.has_value()) << "request " << id;
  if (!got) return;
  ASSERT_EQ(got->size(), expected->size()) << "request " << id;
  for (size_t p = 0; p < got->size(); ++p) {
    ASSERT_EQ((*got)[p].size(), (*expected)[p].size()) << "request " << id << " position " << p;
    for (size_t k = 0; k < (*got)[p].size(); ++k) {
      EXPECT_EQ((*got)[p][k].first, (*expected)[p][k].first) << "request " << id << " position " << p;
      EXPECT_NEAR((*got)[p][k].second, (*expected)[p][k].second, 1e-4) << "request " << id << " position " << p;
    }
  }
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  return p;
}

TEST(AsyncScheduling, GivesEveryRequestWhatSynchronousStepsGive) {
  std::mt19937 rng(11);
  const std::vector<int32_t> shared = test::random_prompt(rng, 40);  // two full 16-token blocks for the prefix cache
  // A stop token the greedy run of `shared` meets after a few tokens, found without the feature under test.
  const Outcome alone = run(false, {{shared, greedy(30)}});
  ASSERT_EQ(alone.outputs.size(), 1u);
  const std::vector<int32_t>& greedy_tokens = alone.outputs.begin()->second.token_ids;
  ASSERT_GE(greedy_tokens.size(), 12u);
  const int32_t stop_token = greedy_tokens[11];

  std::vector<ScriptedRequest> script;
  script.push_back({shared, greedy(40)});
  SamplingParams seeded;  // seeded sampling: the same draws whatever step computes them
  seeded.temperature = 0.8f;
  seeded.top_k = 50;
  seeded.seed = 7;
  seeded.ignore_eos = true;
  seeded.max_tokens = 23;
  script.push_back({test::random_prompt(rng, 30), seeded});
  SamplingParams unseeded;  // the engine's seed
  unseeded.temperature = 1.0f;
  unseeded.min_p = 0.05f;
  unseeded.max_tokens = 61;
  script.push_back({test::random_prompt(rng, 9), unseeded, 5});
  SamplingParams stops = greedy(40);  // a prefix-cache hit that stops on a token, after its min_tokens
  stops.ignore_eos = false;
  stops.min_tokens = 5;
  stops.stop_token_ids = {stop_token};
  script.push_back({shared, stops, 3});
  SamplingParams with_logprobs = greedy(8);
  with_logprobs.logprobs = 2;
  script.push_back({test::random_prompt(rng, 12), with_logprobs, 20});
  script.push_back({test::random_prompt(rng, 17), greedy(50), 2, 15});  // aborted while decoding
  SamplingParams scored = greedy(4);
  scored.prompt_logprobs = 1;
  script.push_back({test::random_prompt(rng, 70), scored, 30});

  const Outcome sync = run(false, script);
  const Outcome async = run(true, script);
  EXPECT_EQ(sync.early_steps(), 0);
  EXPECT_GT(async.early_steps(), 10) << "of " << async.steps << " steps";
  EXPECT_EQ(sync.steps, async.steps);
  ASSERT_EQ(sync.outputs.size(), script.size());
  ASSERT_EQ(async.outputs.size(), script.size());
  for (const auto& [id, expected] : sync.outputs) {
    const RequestOutput& got = async.outputs.at(id);
    EXPECT_EQ(got.token_ids, expected.token_ids) << "request " << id;
    EXPECT_EQ(got.finish_reason, expected.finish_reason) << "request " << id;
    EXPECT_EQ(got.logprobs.has_value(), expected.logprobs.has_value()) << "request " << id;
    if (got.logprobs && expected.logprobs) {
      EXPECT_EQ(got.logprobs->size(), expected.logprobs->size());
    }
    expect_close(got.prompt_logprobs, expected.prompt_logprobs, id);
  }
  EXPECT_EQ(sync.outputs.at(sync.ids[3]).finish_reason, "stop");  // the script hits what it was written for
  EXPECT_EQ(sync.outputs.at(sync.ids[5]).finish_reason, "abort");
}

// Steady decode of two sequences: every step but the first of each stretch, and those whose next token needs a new KV
// block, is launched during the step before.
TEST(AsyncScheduling, LaunchesSteadyDecodeStepsEarly) {
  std::mt19937 rng(3);
  const std::vector<ScriptedRequest> script = {{test::random_prompt(rng, 5), greedy(60)},
                                               {test::random_prompt(rng, 8), greedy(60)}};
  const Outcome o = run(true, script);
  // 59 decode steps; a block boundary (16 tokens) for either sequence costs the early launch of one step.
  EXPECT_GE(o.early_steps(), 45) << "of " << o.steps << " steps";
  const Outcome sync = run(false, script);
  for (size_t i = 0; i < script.size(); ++i) {
    EXPECT_EQ(sync.outputs.at(sync.ids[i]).token_ids, o.outputs.at(o.ids[i]).token_ids);
  }
}

// An early step is still used when sequences leave the batch or prompts join it: the step after a finish by a stop
// token runs the other rows' tokens computed early, and so does the step an abort shows in, and the steps where
// arrivals' prompt chunks join the decode rows (those run as a step of their own beside them).
TEST(AsyncScheduling, AdoptsStepsThatSequencesLeftOrPromptsJoined) {
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i)
    prompts.push_back(test::random_prompt(rng, 8));  // one length: block boundaries in the same steps
  const Outcome alone = run(false, {{prompts[1], greedy(30)}});
  const std::vector<int32_t>& greedy_tokens = alone.outputs.begin()->second.token_ids;
  // The first token from the 9th on that the run has not sampled before (the tiny model repeats itself): the
  // stop comes in step 9 or later, before the block boundary of step 24.
  size_t stop_at = 8;
  while (stop_at < greedy_tokens.size() &&
         std::count(greedy_tokens.begin(), greedy_tokens.begin() + stop_at, greedy_tokens[stop_at]) > 0)
    ++stop_at;
  ASSERT_LT(stop_at, 24u);
  SamplingParams stops = greedy(40);
  stops.ignore_eos = false;
  stops.stop_token_ids = {greedy_tokens[stop_at]};
  SamplingParams seeded = greedy(40);
  seeded.temperature = 0.9f;
  seeded.seed = 3;
  const std::vector<ScriptedRequest> script = {
      {prompts[0], greedy(40)},    {prompts[1], stops},
      {prompts[2], seeded},        {prompts[3], greedy(40), 0, 17},                 // aborted in step 17
      {prompts[4], greedy(20), 4}, {test::random_prompt(rng, 100), greedy(5), 19},  // a 100-token prompt in chunks
  };
  const Outcome sync = run(false, script);
  const Outcome async = run(true, script);
  ASSERT_EQ(sync.outputs.size(), script.size());
  ASSERT_EQ(async.outputs.size(), script.size());
  for (const auto& [id, expected] : sync.outputs) {
    EXPECT_EQ(async.outputs.at(id).token_ids, expected.token_ids) << "request " << id;
    EXPECT_EQ(async.outputs.at(id).finish_reason, expected.finish_reason) << "request " << id;
  }
  ASSERT_EQ(sync.outputs.at(sync.ids[1]).finish_reason, "stop");
  ASSERT_EQ(sync.outputs.at(sync.ids[3]).finish_reason, "abort");
  const int stop_step = async.done.at(async.ids[1]);
  EXPECT_TRUE(async.early.at(static_cast<size_t>(stop_step) + 1)) << "the step after the stop, " << stop_step + 1;
  const int abort_step = async.done.at(async.ids[3]);
  EXPECT_EQ(abort_step, 17);
  EXPECT_TRUE(async.early.at(static_cast<size_t>(abort_step))) << "the step without the aborted row";
  int mixed = 0, mixed_early = 0;
  for (size_t i = 0; i < async.early.size(); ++i) {
    mixed += async.mixed[i] ? 1 : 0;
    mixed_early += async.mixed[i] && async.early[i] ? 1 : 0;
  }
  EXPECT_GE(mixed, 3);  // the arrivals' chunks beside decode rows (64-token budget)
  EXPECT_GE(mixed_early, 2) << "of " << mixed << " mixed steps";
}

}  // namespace
}  // namespace nanovllm
