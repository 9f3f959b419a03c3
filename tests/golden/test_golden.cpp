// Golden tests: the whole engine on the CPU against HF transformers (fp32, run on the GPU machine by
// tools/hf_reference.py) on random-weight checkpoints that nanovllm-make-checkpoint regenerates from a seed.
// Also: every prompt in one batch gives what it gives alone, under chunked prefill, prefix-cache hits and steps
// that mix prefill and decode rows, under both step policies.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"
#include "model/safetensors_writer.h"
#include "nanovllm/llm.h"
#include "support/expect_invalid.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr float kLogprobTolerance = 1e-3f;
constexpr int kGreedyTokens = 48;

struct Case {
  std::vector<int32_t> prompt;
  std::vector<std::vector<std::pair<int32_t, float>>> prompt_logprobs;  // [0] empty
  std::vector<int32_t> greedy;
  std::vector<float> greedy_logprobs;
  std::vector<float> greedy_top2_margins;  // HF's top-1 minus top-2 logprob at each greedy step
};

std::vector<Case> load_fixture(const fs::path& path, int& k) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path.string());
  const json j = json::parse(in);
  std::vector<Case> cases;
  k = 0;
  for (const json& p : j.at("prompts")) {
    Case c;
    c.prompt = p.at("prompt_token_ids").get<std::vector<int32_t>>();
    for (const json& pos : p.at("prompt_logprobs")) {
      c.prompt_logprobs.emplace_back();
      if (pos.is_null()) continue;
      for (const json& pair : pos) c.prompt_logprobs.back().emplace_back(pair[0].get<int32_t>(), pair[1].get<float>());
      k = static_cast<int>(c.prompt_logprobs.back().size()) - 1;
    }
    c.greedy = p.at("greedy_token_ids").get<std::vector<int32_t>>();
    c.greedy_logprobs = p.at("greedy_logprobs").get<std::vector<float>>();
    c.greedy_top2_margins = p.at("greedy_top2_margins").get<std::vector<float>>();
    cases.push_back(std::move(c));
  }
  return cases;
}

fs::path golden_dir() {
  const char* dir = std::getenv("NANOVLLM_GOLDEN_DIR");
  return dir ? fs::path(dir) : fs::path(NANOVLLM_GOLDEN_DIR_DEFAULT);
}

fs::path fixture_dir() {
  const char* dir = std::getenv("NANOVLLM_FIXTURE_DIR");
  return dir ? fs::path(dir) : fs::path(NANOVLLM_FIXTURE_DIR);
}

SamplingParams greedy_params(int k) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = kGreedyTokens;
  p.ignore_eos = true;
  p.prompt_logprobs = k;
  p.logprobs = 0;
  return p;
}

EngineConfig cpu_config(const fs::path& model, int block_size, int max_batched_tokens, int max_seqs,
                        int num_blocks = -1, int tensor_parallel_size = 1,
                        StepPolicy step_policy = EngineConfig{}.step_policy) {
  EngineConfig c;
  c.step_policy = step_policy;
  c.tensor_parallel_size = tensor_parallel_size;
  c.num_kvcache_blocks = num_blocks;
  c.model = model.string();
  c.device = "cpu";
  c.kvcache_block_size = block_size;
  c.max_model_len = 512;
  c.max_num_batched_tokens = max_batched_tokens;
  c.max_num_seqs = max_seqs;
  c.show_progress = false;
  return c;
}

// Our top-k against HF's: values within tolerance position by position; ids equal unless HF's own values
// there are a near-tie (then either order is a correct answer).
void expect_position_matches(const PositionLogprobs& ours, const std::vector<std::pair<int32_t, float>>& hf,
                             const std::string& where) {
  ASSERT_EQ(ours.size(), hf.size()) << where;
  ASSERT_EQ(ours[0].first, hf[0].first) << where << ": scored token";
  EXPECT_NEAR(ours[0].second, hf[0].second, kLogprobTolerance) << where << ": scored token logprob";
  for (size_t j = 1; j < hf.size(); ++j) {
    EXPECT_NEAR(ours[j].second, hf[j].second, kLogprobTolerance) << where << ": top-" << j << " logprob";
    const bool tie = (j > 1 && std::fabs(hf[j].second - hf[j - 1].second) < 2 * kLogprobTolerance) ||
                     (j + 1 < hf.size() && std::fabs(hf[j].second - hf[j + 1].second) < 2 * kLogprobTolerance);
    if (!tie) {
      EXPECT_EQ(ours[j].first, hf[j].first) << where << ": top-" << j << " id";
    }
  }
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = golden_dir() / GetParam();
    fixture_ = fixture_dir() / (GetParam() + ".json");
    ASSERT_TRUE(fs::exists(model_ / "config.json")) << "checkpoint missing: " << model_;
    ASSERT_TRUE(fs::exists(fixture_)) << "fixture missing: " << fixture_;
    cases_ = load_fixture(fixture_, k_);
    ASSERT_FALSE(cases_.empty());
  }
  fs::path model_, fixture_;
  std::vector<Case> cases_;
  int k_ = 0;
};

// Each prompt alone (one engine, so later prompts may hit the prefix cache of earlier ones) vs HF.
TEST_P(GoldenTest, MatchesTransformersPromptByPrompt) {
  LLM llm(cpu_config(model_, 16, 4096, 8));
  double worst = 0;
  for (size_t i = 0; i < cases_.size(); ++i) {
    const Case& c = cases_[i];
    auto out = llm.generate({Prompt::from_tokens(c.prompt)}, greedy_params(k_));
    ASSERT_EQ(out.size(), 1u);
    ASSERT_TRUE(out[0].error.empty()) << out[0].error;
    EXPECT_EQ(out[0].token_ids, c.greedy) << "prompt " << i << ": greedy continuation differs";
    ASSERT_EQ(out[0].logprobs->size(), c.greedy.size());
    for (size_t t = 0; t < c.greedy.size(); ++t)
      EXPECT_NEAR((*out[0].logprobs)[t][0].second, c.greedy_logprobs[t], kLogprobTolerance)
          << "prompt " << i << " token " << t;
    const auto& plp = *out[0].prompt_logprobs;
    ASSERT_EQ(plp.size(), c.prompt.size());
    EXPECT_TRUE(plp[0].empty());
    for (size_t p = 1; p < c.prompt.size(); ++p) {
      expect_position_matches(plp[p], c.prompt_logprobs[p],
                              "prompt " + std::to_string(i) + " position " + std::to_string(p));
      worst = std::max(worst, static_cast<double>(std::fabs(plp[p][0].second - c.prompt_logprobs[p][0].second)));
    }
  }
  std::printf("[golden %s] worst prompt-logprob error vs HF: %.3g\n", GetParam().c_str(), worst);
}

constexpr StepPolicy kStepPolicies[] = {StepPolicy::DecodeFirst, StepPolicy::PrefillFirst};

const char* name_of(StepPolicy policy) { return policy == StepPolicy::DecodeFirst ? "decode-first" : "prefill-first"; }

// All prompts in one generate call, under several scheduler shapes and both step policies, match HF as each
// prompt alone does (same greedy tokens; prompt logprobs within the same 1e-3), so batching, chunking, mixed
// steps and preemption change nothing.
TEST_P(GoldenTest, BatchEqualsSingle) {
  std::vector<Prompt> prompts;
  for (const Case& c : cases_) prompts.push_back(Prompt::from_tokens(c.prompt));
  struct Shape {
    int block_size, max_batched_tokens, max_seqs, num_blocks;
  };
  // Everything at once; chunked prefill with few sequences a step; a cache so small that decode must
  // preempt and recompute.
  for (StepPolicy policy : kStepPolicies)
    for (Shape s : {Shape{16, 4096, 64, -1}, Shape{16, 40, 3, -1}, Shape{32, 64, 64, -1}, Shape{16, 512, 64, 24}}) {
      LLM llm(cpu_config(model_, s.block_size, s.max_batched_tokens, s.max_seqs, s.num_blocks, 1, policy));
      auto outs = llm.generate(prompts, greedy_params(k_));
      ASSERT_EQ(outs.size(), cases_.size());
      for (size_t i = 0; i < outs.size(); ++i) {
        const std::string where = std::string(name_of(policy)) + ", block " + std::to_string(s.block_size) +
                                  ", budget " + std::to_string(s.max_batched_tokens) + ", prompt " + std::to_string(i);
        ASSERT_TRUE(outs[i].error.empty()) << outs[i].error;
        EXPECT_EQ(outs[i].token_ids, cases_[i].greedy) << where;
        const auto& plp = *outs[i].prompt_logprobs;
        for (size_t p = 1; p < plp.size(); ++p)
          expect_position_matches(plp[p], cases_[i].prompt_logprobs[p], where + " position " + std::to_string(p));
      }
    }
}

// Prompts arrive one at a time, every few steps, while the earlier requests decode: under decode-first each
// prompt is prefilled in steps that also decode every earlier request (the long ones chunked over several
// steps), under prefill-first in steps of its own. Each request must get what it gets alone: the same greedy
// tokens, and its token and prompt logprobs within 1e-3 (and HF's tokens). A second round sends the prompts
// again without prompt logprobs, so their prefill starts after a prefix-cache hit (in a mixed step).
TEST_P(GoldenTest, MixedPrefillDecodeStepsEqualSingle) {
  constexpr int kBudget = 40, kGap = 4;
  std::vector<RequestOutput> alone;
  {
    LLM llm(cpu_config(model_, 16, 4096, 8));
    for (const Case& c : cases_) alone.push_back(llm.generate({Prompt::from_tokens(c.prompt)}, greedy_params(k_))[0]);
  }
  SamplingParams cached = greedy_params(k_);
  cached.prompt_logprobs.reset();  // prompt logprobs need every position computed: no prefix-cache hits
  for (StepPolicy policy : kStepPolicies) {
    LLMEngine engine(cpu_config(model_, 16, kBudget, 64, -1, 1, policy));
    for (const SamplingParams& params : {greedy_params(k_), cached}) {
      const bool first_round = params.prompt_logprobs.has_value();
      std::map<int64_t, size_t> index_of;
      std::vector<RequestOutput> outs(cases_.size());
      auto step = [&] {
        for (RequestOutput& out : engine.step()) outs[index_of.at(out.request_id)] = std::move(out);
      };
      for (size_t i = 0; i < cases_.size(); ++i) {
        index_of[engine.add_request(Prompt::from_tokens(cases_[i].prompt), params)] = i;
        step();
        // Every earlier request is still decoding (48 tokens each, a new prompt every 4 steps, each prefilled
        // within 4 steps). Decode-first: one token for each of them, the prompt in the rest of the budget. In
        // the second round the prompt's full blocks (but never its last token) come from the first round's.
        const int prompt_len = static_cast<int>(cases_[i].prompt.size());
        const int hits = first_round ? 0 : (prompt_len - 1) / 16 * 16;
        const int decodes = policy == StepPolicy::DecodeFirst ? static_cast<int>(i) : 0;
        EXPECT_TRUE(engine.last_step().is_prefill) << name_of(policy) << ", prompt " << i;
        EXPECT_EQ(engine.last_step().num_tokens, std::min(kBudget, decodes + prompt_len - hits))
            << name_of(policy) << (first_round ? "" : ", cached") << ", prompt " << i;
        for (int s = 1; s < kGap; ++s) step();
      }
      while (!engine.is_finished()) step();
      for (size_t i = 0; i < cases_.size(); ++i) {
        const std::string where =
            std::string(name_of(policy)) + (first_round ? "" : ", cached") + ", prompt " + std::to_string(i);
        ASSERT_TRUE(outs[i].error.empty()) << outs[i].error;
        EXPECT_EQ(outs[i].token_ids, cases_[i].greedy) << where;
        EXPECT_EQ(outs[i].token_ids, alone[i].token_ids) << where;
        ASSERT_TRUE(outs[i].logprobs.has_value()) << where;
        ASSERT_EQ(outs[i].logprobs->size(), alone[i].logprobs->size()) << where;
        for (size_t t = 0; t < alone[i].logprobs->size(); ++t)
          EXPECT_NEAR((*outs[i].logprobs)[t][0].second, (*alone[i].logprobs)[t][0].second, kLogprobTolerance)
              << where << " token " << t;
        if (!first_round) continue;
        const auto& plp = *outs[i].prompt_logprobs;
        const auto& want_plp = *alone[i].prompt_logprobs;
        ASSERT_EQ(plp.size(), want_plp.size()) << where;
        for (size_t p = 1; p < plp.size(); ++p) {
          ASSERT_EQ(plp[p].size(), want_plp[p].size()) << where << " position " << p;
          for (size_t j = 0; j < plp[p].size(); ++j)
            EXPECT_NEAR(plp[p][j].second, want_plp[p][j].second, kLogprobTolerance) << where << " position " << p;
          EXPECT_EQ(plp[p][0].first, want_plp[p][0].first) << where << " position " << p;
        }
      }
    }
  }
}

// min_tokens as vLLM means it: stop tokens cannot be sampled before it. Greedy would pick the fixture's first
// token, so making that token a stop token with min_tokens 3 must change the first three tokens, and the
// request may stop on it afterwards.
TEST_P(GoldenTest, MinTokensBansStopTokensUntilReached) {
  const Case& c = cases_.back();
  const int32_t first = c.greedy[0];
  SamplingParams p = greedy_params(0);
  p.prompt_logprobs.reset();
  p.logprobs = 1;
  p.stop_token_ids = {first};
  p.min_tokens = 3;
  p.max_tokens = 20;
  LLM llm(cpu_config(model_, 16, 4096, 8));
  auto out = llm.generate({Prompt::from_tokens(c.prompt)}, p);
  ASSERT_GE(out[0].token_ids.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NE(out[0].token_ids[i], first) << "token " << i << " sampled before min_tokens";
  // Logprobs stay those of the raw logits: the banned greedy token is still the top-1 with HF's logprob.
  const PositionLogprobs& step0 = (*out[0].logprobs)[0];
  ASSERT_EQ(step0.size(), 2u);
  EXPECT_EQ(step0[1].first, first);
  EXPECT_NEAR(step0[1].second, c.greedy_logprobs[0], kLogprobTolerance);
  for (size_t i = 3; i + 1 < out[0].token_ids.size(); ++i) EXPECT_NE(out[0].token_ids[i], first) << "did not stop";
  // Without min_tokens the very first token stops the request.
  p.min_tokens = 0;
  auto plain = llm.generate({Prompt::from_tokens(c.prompt)}, p);
  EXPECT_EQ(plain[0].token_ids, std::vector<int32_t>{first});
  EXPECT_EQ(plain[0].finish_reason, "stop");
}

// An aborted request is owed to the caller: the engine is not finished until a step has returned it, once.
TEST_P(GoldenTest, AbortedRequestsAreReturnedBeforeTheEngineIsFinished) {
  LLMEngine engine(cpu_config(model_, 16, 4096, 8));
  const int64_t lone = engine.add_request(Prompt::from_tokens(cases_[0].prompt), greedy_params(0));
  engine.abort(lone);
  EXPECT_FALSE(engine.is_finished());
  std::vector<RequestOutput> out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].request_id, lone);
  EXPECT_EQ(out[0].finish_reason, "abort");
  EXPECT_TRUE(engine.is_finished());

  // Mid-run: one of two requests aborted after its prefill; both come back, each exactly once.
  const int64_t kept = engine.add_request(Prompt::from_tokens(cases_[1].prompt), greedy_params(0));
  const int64_t cut = engine.add_request(Prompt::from_tokens(cases_[2].prompt), greedy_params(0));
  engine.step();
  engine.abort(cut);
  std::map<int64_t, RequestOutput> done;
  while (!engine.is_finished())
    for (RequestOutput& o : engine.step()) ASSERT_TRUE(done.emplace(o.request_id, std::move(o)).second);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done.at(cut).finish_reason, "abort");
  EXPECT_EQ(done.at(kept).finish_reason, "length");
  EXPECT_EQ(done.at(kept).token_ids, cases_[1].greedy);
}

// An FP8 KV cache (scale 1.0: these checkpoints carry none) against HF in fp32. Bounds fixed before the first
// measurement: e4m3 keeps 3 mantissa bits (a cached value is off by up to 1/16 of itself, ~16x bf16's
// rounding), so four times the bf16 GPU test's bounds: each prompt logprob within 0.6 and 0.16 on average;
// greedy tokens equal HF's up to the first step where HF's top two are closer than 0.4.
TEST_P(GoldenTest, Fp8KvCacheMatchesTransformersWithinFp8Tolerance) {
  constexpr double kMax = 0.6, kMean = 0.16, kTie = 0.4;
  EngineConfig config = cpu_config(model_, 16, 4096, 8);
  config.kv_cache_dtype = "fp8";
  LLM llm(config);
  std::vector<Prompt> prompts;
  for (const Case& c : cases_) prompts.push_back(Prompt::from_tokens(c.prompt));
  SamplingParams params = greedy_params(k_);
  params.max_tokens = static_cast<int>(cases_[0].greedy.size());
  const std::vector<RequestOutput> outs = llm.generate(prompts, params);
  double sum = 0, worst = 0;
  long count = 0, agreed = 0, compared = 0;
  for (size_t i = 0; i < cases_.size(); ++i) {
    ASSERT_TRUE(outs[i].error.empty()) << outs[i].error;
    const auto& plp = *outs[i].prompt_logprobs;
    for (size_t p = 1; p < plp.size(); ++p) {
      const double d = std::fabs(plp[p][0].second - cases_[i].prompt_logprobs[p][0].second);
      EXPECT_LE(d, kMax) << "prompt " << i << " position " << p;
      sum += d, worst = std::max(worst, d), ++count;
    }
    const Case& c = cases_[i];
    for (size_t t = 0; t < c.greedy.size() && t < outs[i].token_ids.size(); ++t, ++agreed) {
      if (outs[i].token_ids[t] == c.greedy[t]) continue;
      EXPECT_LT(c.greedy_top2_margins[t], kTie) << "prompt " << i << ": greedy token " << t << " differs from HF";
      break;
    }
    compared += static_cast<long>(c.greedy.size());
  }
  EXPECT_LE(sum / static_cast<double>(count), kMean);
  std::printf(
      "[golden %s fp8 kv] prompt logprob |d| vs HF fp32: mean %.4f, max %.4f over %ld tokens; greedy agreement "
      "before first divergence %ld/%ld\n",
      GetParam().c_str(), sum / static_cast<double>(count), worst, count, agreed, compared);
}

// The checkpoint's self_attn.k_scale / v_scale reach the cache: scales of 1.0 change nothing against a
// checkpoint without them, scales of 64 (most values then fall below FP8's subnormals) change the logprobs.
TEST(GoldenFp8KvCache, UsesTheCheckpointsScales) {
  const fs::path golden = golden_dir() / "golden_tied_gqa2";
  ASSERT_TRUE(fs::exists(golden / "model.safetensors"));
  int k = 0;
  const std::vector<Case> cases = load_fixture(fixture_dir() / "golden_tied_gqa2.json", k);
  const json config = json::parse(std::ifstream(golden / "config.json"));
  const int layers = config.at("num_hidden_layers").get<int>();
  const auto run = [&](std::optional<float> scale) {
    const fs::path dir = fs::temp_directory_path() / ("nanovllm_kv_scales_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(golden / "config.json", dir / "config.json");
    // No model.safetensors in the folder: the reader takes every *.safetensors file.
    fs::create_symlink(fs::absolute(golden / "model.safetensors"), dir / "weights.safetensors");
    if (scale) {
      std::vector<TensorRecord> records;
      for (int i = 0; i < layers; ++i)
        for (const char* name : {"k_scale", "v_scale"})
          records.push_back({"model.layers." + std::to_string(i) + ".self_attn." + name, DType::F32, {}});
      write_safetensors(dir / "kv_scales.safetensors", records,
                        [&](size_t, std::vector<std::byte>& out) { std::memcpy(out.data(), &*scale, sizeof(float)); });
    }
    EngineConfig c = cpu_config(dir, 16, 4096, 8);
    c.kv_cache_dtype = "fp8";
    SamplingParams params = greedy_params(k);
    params.max_tokens = 4;
    std::vector<float> logprobs;
    {
      LLM llm(c);
      const RequestOutput out = llm.generate({Prompt::from_tokens(cases.back().prompt)}, params)[0];
      EXPECT_TRUE(out.error.empty()) << out.error;
      for (size_t p = 1; p < out.prompt_logprobs->size(); ++p) logprobs.push_back((*out.prompt_logprobs)[p][0].second);
    }
    fs::remove_all(dir);
    return logprobs;
  };
  const std::vector<float> without = run(std::nullopt);
  EXPECT_EQ(run(1.0f), without);
  const std::vector<float> coarse = run(64.0f);
  ASSERT_EQ(coarse.size(), without.size());
  double largest = 0;
  for (size_t i = 0; i < coarse.size(); ++i) largest = std::max(largest, std::fabs(double{coarse[i]} - without[i]));
  EXPECT_GT(largest, 0.05) << "scales of 64 changed nothing: were they read?";
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, GoldenTest,
                         ::testing::Values("golden_tied_gqa2", "golden_untied_sharded", "qwen2_bias"));

// Tensor parallelism on the CPU backend (threads over host memory): each rank holds its shard, the
// collectives join them, and the result must still be HF's to 1e-3 with the same greedy tokens. Covers
// replicated KV heads (1 KV head over 2 ranks, 2 over 4), an odd vocabulary cut into uneven chunks (701 over
// 2 and 4), untied and tied lm_heads, and Qwen2's sharded biases.
struct TensorParallelCase {
  std::string checkpoint;
  int size;
};

class TensorParallelGoldenTest : public ::testing::TestWithParam<TensorParallelCase> {
 protected:
  void SetUp() override {
    model_ = golden_dir() / GetParam().checkpoint;
    ASSERT_TRUE(fs::exists(model_ / "config.json")) << "checkpoint missing: " << model_;
    cases_ = load_fixture(fixture_dir() / (GetParam().checkpoint + ".json"), k_);
  }
  fs::path model_;
  std::vector<Case> cases_;
  int k_ = 0;
};

TEST_P(TensorParallelGoldenTest, MatchesTransformers) {
  std::vector<Prompt> prompts;
  for (const Case& c : cases_) prompts.push_back(Prompt::from_tokens(c.prompt));
  // All at once, then chunked prefill with few sequences a step (prompt logprobs in several lm_head calls).
  for (auto [budget, seqs] : {std::pair{4096, 64}, std::pair{40, 3}}) {
    LLM llm(cpu_config(model_, 16, budget, seqs, -1, GetParam().size));
    auto outs = llm.generate(prompts, greedy_params(k_));
    ASSERT_EQ(outs.size(), cases_.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::string where = "tp " + std::to_string(GetParam().size) + ", budget " + std::to_string(budget) +
                                ", prompt " + std::to_string(i);
      ASSERT_TRUE(outs[i].error.empty()) << outs[i].error;
      EXPECT_EQ(outs[i].token_ids, cases_[i].greedy) << where;
      ASSERT_TRUE(outs[i].logprobs && outs[i].prompt_logprobs) << where;
      ASSERT_EQ(outs[i].logprobs->size(), cases_[i].greedy.size()) << where;
      for (size_t t = 0; t < cases_[i].greedy.size(); ++t)
        EXPECT_NEAR((*outs[i].logprobs)[t][0].second, cases_[i].greedy_logprobs[t], kLogprobTolerance) << where;
      const auto& plp = *outs[i].prompt_logprobs;
      ASSERT_EQ(plp.size(), cases_[i].prompt.size()) << where;
      for (size_t p = 1; p < plp.size(); ++p)
        expect_position_matches(plp[p], cases_[i].prompt_logprobs[p], where + " position " + std::to_string(p));
    }
  }
}

// The min_tokens ban is applied on rank 0 only, but the logprobs it forces to be recomputed need every rank.
TEST_P(TensorParallelGoldenTest, MinTokensBanRecomputesLogprobsOnAllRanks) {
  const Case& c = cases_.back();
  SamplingParams p = greedy_params(0);
  p.prompt_logprobs.reset();
  p.logprobs = 1;
  p.stop_token_ids = {c.greedy[0]};
  p.min_tokens = 2;
  p.max_tokens = 4;
  LLM llm(cpu_config(model_, 16, 4096, 8, -1, GetParam().size));
  auto out = llm.generate({Prompt::from_tokens(c.prompt)}, p);
  ASSERT_TRUE(out[0].error.empty()) << out[0].error;
  EXPECT_NE(out[0].token_ids[0], c.greedy[0]);
  ASSERT_TRUE(out[0].logprobs && !out[0].logprobs->empty());
  const PositionLogprobs& step0 = (*out[0].logprobs)[0];
  ASSERT_EQ(step0.size(), 2u);  // the sampled token and the top 1
  EXPECT_EQ(step0[1].first, c.greedy[0]);
  EXPECT_NEAR(step0[1].second, c.greedy_logprobs[0], kLogprobTolerance);
}

// Without logprobs the ranks sample on their own vocabulary chunks and send rank 0 only (key, token) pairs:
// the tokens must be the ones one rank draws from whole rows, for seeded temperature sampling (the noise is
// keyed by the global token id) and greedy rows mixed in one batch. top_k needs whole rows: the same tokens
// again, through the gathered logits. Each step that samples must have taken the path it should.
TEST_P(TensorParallelGoldenTest, SamplingOnVocabularyShardsDrawsWhatOneRankDraws) {
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < cases_.size(); ++i) {
    prompts.push_back(Prompt::from_tokens(cases_[i].prompt));
    SamplingParams p;
    // Greedy, T < 1 (the ranks also send their raw argmax then) and a flat T > 1 where many tokens can win.
    p.temperature = i % 3 == 2 ? 0.0f : (i % 3 == 1 ? 0.7f : 1.3f);
    p.seed = 1000 + i;
    p.max_tokens = 12;
    p.ignore_eos = true;
    params.push_back(p);
  }
  for (int top_k : {-1, 7}) {
    for (SamplingParams& p : params) p.top_k = top_k;
    LLM one(cpu_config(model_, 16, 4096, 64));
    const auto want = one.generate(prompts, params);
    LLMEngine ranks(cpu_config(model_, 16, 4096, 64, -1, GetParam().size));
    std::map<int64_t, size_t> index_of;
    for (size_t i = 0; i < prompts.size(); ++i) index_of[ranks.add_request(prompts[i], params[i])] = i;
    std::vector<RequestOutput> got(prompts.size());
    int steps = 0, on_shards = 0;
    while (!ranks.is_finished()) {
      for (RequestOutput& out : ranks.step()) got[index_of.at(out.request_id)] = std::move(out);
      ++steps;
      on_shards += ranks.last_step().sampled_on_shards;
    }
    // Every step here samples (one prefill step, then decode steps).
    EXPECT_EQ(on_shards, top_k > 0 ? 0 : steps) << "of " << steps << " steps, top_k " << top_k;
    std::set<int32_t> distinct;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].token_ids, want[i].token_ids) << "prompt " << i << ", top_k " << top_k;
      distinct.insert(want[i].token_ids.begin(), want[i].token_ids.end());
    }
    EXPECT_GT(distinct.size(), 10u) << "the sampled tokens should spread over the vocabulary";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, TensorParallelGoldenTest,
    ::testing::Values(TensorParallelCase{"golden_tied_gqa2", 2}, TensorParallelCase{"golden_untied_sharded", 2},
                      TensorParallelCase{"golden_untied_sharded", 4}, TensorParallelCase{"qwen2_bias", 2}),
    [](const auto& info) { return info.param.checkpoint + "_tp" + std::to_string(info.param.size); });

// Head counts the ranks cannot split are refused up front by the engine, naming the field (every rule of
// ShardLayout is tested in tests/parallel/test_shard_layout.cpp; these checkpoints break the head rule only).
TEST(TensorParallelGolden, UnsplittableModelsAreRefused) {
  const fs::path tied = golden_dir() / "golden_tied_gqa2";         // 2 query heads, 1 KV head
  const fs::path untied = golden_dir() / "golden_untied_sharded";  // 4 query heads, 2 KV heads, intermediate 160
  for (const auto& checkpoint : {std::pair{tied, 4}, std::pair{untied, 3}}) {
    // Named copies rather than a structured binding: the lambda below captures them.
    const fs::path& model = checkpoint.first;
    const int size = checkpoint.second;
    testing::expect_invalid([&] { LLM llm(cpu_config(model, 16, 4096, 8, -1, size)); },
                            {"num_attention_heads", "tensor_parallel_size " + std::to_string(size)});
  }
}

}  // namespace
}  // namespace nanovllm
