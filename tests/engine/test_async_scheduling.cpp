// Asynchronous scheduling (EngineConfig::async_scheduling): a decode step's successor launched before the step's
// ids reach the host changes nothing a request gets. The same scripted run, with arrivals, an abort, stop tokens,
// min_tokens, logprobs, prefix-cache hits and sequences ending at different steps, must give every request the same
// tokens and finish reason with and without it, and with it some steps must have been launched early.
#include <gtest/gtest.h>

#include <map>
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
  int early_steps = 0;  // steps launched during the one before
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
    for (RequestOutput& out : engine.step()) o.outputs[out.request_id] = std::move(out);
    ++o.steps;
    if (engine.last_step().launched_early) ++o.early_steps;
  }
  return o;
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
  EXPECT_EQ(sync.early_steps, 0);
  EXPECT_GT(async.early_steps, 10) << "of " << async.steps << " steps";
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
  EXPECT_GE(o.early_steps, 45) << "of " << o.steps << " steps";
  const Outcome sync = run(false, script);
  for (size_t i = 0; i < script.size(); ++i) {
    EXPECT_EQ(sync.outputs.at(sync.ids[i]).token_ids, o.outputs.at(o.ids[i]).token_ids);
  }
}

}  // namespace
}  // namespace nanovllm
