// Per-step outputs of LLMEngine: a request's deltas add up to its whole output (tokens, text, logprobs), text
// comes only in complete UTF-8 characters, stop strings are held back until they can no longer match, and the
// request and engine stats a server reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm {
namespace {

// Every multi-byte character complete (the detokenizer's U+FFFD repairs are complete characters too).
bool is_complete_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

class RequestDeltas : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::tiny_model_with_tokenizer("nanovllm_request_deltas");
    if (dir_.empty()) GTEST_SKIP() << "no Qwen3 tokenizer files (scripts/fetch_tokenizer.sh)";
    std::mt19937 rng(5);
    for (int length : {7, 50, 21}) prompts_.push_back(test::random_prompt(rng, length));
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  EngineConfig config() const {
    EngineConfig c = test::tiny_config();
    c.model = dir_.string();
    c.max_num_batched_tokens = 32;  // the 50-token prompt prefills in chunks, beside decode rows
    return c;
  }

  // Runs all requests through step_deltas(); every delta, in order, per request.
  std::map<int64_t, std::vector<RequestDelta>> run_deltas(LLMEngine& engine,
                                                          const std::vector<SamplingParams>& params) {
    for (size_t i = 0; i < prompts_.size(); ++i) engine.add_request(Prompt::from_tokens(prompts_[i]), params[i]);
    std::map<int64_t, std::vector<RequestDelta>> deltas;
    while (!engine.is_finished())
      for (RequestDelta& d : engine.step_deltas()) deltas[d.request_id].push_back(std::move(d));
    return deltas;
  }

  // The offline way: whole outputs of the requests as they finish.
  std::map<int64_t, RequestOutput> run_whole(const std::vector<SamplingParams>& params) {
    LLMEngine engine(config());
    for (size_t i = 0; i < prompts_.size(); ++i) engine.add_request(Prompt::from_tokens(prompts_[i]), params[i]);
    std::map<int64_t, RequestOutput> outputs;
    while (!engine.is_finished())
      for (RequestOutput& o : engine.step()) outputs[o.request_id] = std::move(o);
    return outputs;
  }

  static RequestOutput sum(std::vector<RequestDelta> deltas) {
    RequestOutput out;
    for (RequestDelta& d : deltas) out.append(std::move(d));
    return out;
  }

  std::filesystem::path dir_;
  std::vector<std::vector<int32_t>> prompts_;
};

std::vector<SamplingParams> greedy_and_seeded(int max_tokens) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = max_tokens;
  greedy.ignore_eos = true;
  greedy.logprobs = 3;
  greedy.prompt_logprobs = 2;
  SamplingParams seeded = greedy;
  seeded.temperature = 0.9f;
  seeded.top_k = 50;
  seeded.seed = 7;
  seeded.prompt_logprobs.reset();
  return {greedy, seeded, greedy};
}

TEST_F(RequestDeltas, AddUpToTheWholeOutput) {
  const std::vector<SamplingParams> params = greedy_and_seeded(20);
  LLMEngine engine(config());
  const auto deltas = run_deltas(engine, params);
  const auto whole = run_whole(params);
  ASSERT_EQ(deltas.size(), prompts_.size());
  for (const auto& [id, list] : deltas) {
    SCOPED_TRACE("request " + std::to_string(id));
    const RequestOutput& expected = whole.at(id);
    const RequestOutput got = sum(list);
    EXPECT_EQ(got.prompt_token_ids, prompts_[id]);
    EXPECT_EQ(got.token_ids, expected.token_ids);
    EXPECT_EQ(got.token_ids.size(), 20u);
    EXPECT_EQ(got.text, expected.text);
    EXPECT_EQ(got.text, engine.tokenizer()->decode(got.token_ids, true));
    EXPECT_EQ(got.logprobs, expected.logprobs);
    ASSERT_TRUE(got.logprobs);
    EXPECT_EQ(got.logprobs->size(), 20u);
    EXPECT_EQ(got.prompt_logprobs, expected.prompt_logprobs);
    EXPECT_EQ(got.prompt_logprobs.has_value(), params[id].prompt_logprobs.has_value());
    EXPECT_EQ(got.finish_reason, "length");
    // One delta per sampled token, each with its text in whole characters; only the last is finished.
    ASSERT_EQ(list.size(), 20u);
    for (size_t i = 0; i < list.size(); ++i) {
      EXPECT_EQ(list[i].token_ids.size(), 1u);
      EXPECT_EQ(list[i].logprobs->size(), 1u);
      EXPECT_TRUE(is_complete_utf8(list[i].text)) << i;
      EXPECT_EQ(list[i].finished, i + 1 == list.size());
      EXPECT_EQ(list[i].prompt_token_ids.empty(), i > 0);
      EXPECT_EQ(list[i].prompt_logprobs.has_value(), i == 0 && params[id].prompt_logprobs.has_value());
      if (i > 0) {
        EXPECT_GE(list[i].time, list[i - 1].time);
      }
    }
    // Stats for TTFT and inter-token latency.
    const RequestMetrics& m = list.back().metrics;
    ASSERT_TRUE(m.first_scheduled_time && m.first_token_time && m.last_token_time && m.finished_time);
    EXPECT_LE(m.arrival_time, *m.first_scheduled_time);
    EXPECT_LT(*m.first_scheduled_time, *m.first_token_time);
    EXPECT_EQ(*m.first_token_time, list.front().time);
    EXPECT_EQ(*m.last_token_time, list.back().time);
    EXPECT_GT(m.first_token_seconds(), m.queue_seconds());
  }
}

TEST_F(RequestDeltas, HoldBackStopStringsUntilTheyCannotMatch) {
  // Greedy text without stop strings, then a stop string taken from its middle (whole characters).
  std::vector<SamplingParams> params = greedy_and_seeded(24);
  const std::string full = run_whole(params).at(0).text;
  size_t begin = full.size() / 2;
  while (begin > 0 && (static_cast<unsigned char>(full[begin]) & 0xC0) == 0x80) --begin;
  size_t end = begin + 3;
  while (end < full.size() && (static_cast<unsigned char>(full[end]) & 0xC0) == 0x80) ++end;
  ASSERT_LT(end, full.size()) << full;
  const std::string stop = full.substr(begin, end - begin);
  params[0].stop = {"a stop string that never comes", stop};

  LLMEngine engine(config());
  const std::vector<RequestDelta> list = run_deltas(engine, params).at(0);
  const RequestOutput got = sum(list);
  EXPECT_EQ(got.text, full.substr(0, full.find(stop)));
  EXPECT_EQ(got.finish_reason, "stop");
  EXPECT_EQ(got.token_ids, run_whole(params).at(0).token_ids);
  // Before the end, what was handed out stays (stop string length - 1) bytes behind the decoded tokens.
  const size_t holdback = std::string("a stop string that never comes").size() - 1;
  std::vector<int32_t> tokens;
  std::string text;
  for (const RequestDelta& d : list) {
    tokens.insert(tokens.end(), d.token_ids.begin(), d.token_ids.end());
    text += d.text;
    EXPECT_TRUE(is_complete_utf8(d.text));
    EXPECT_EQ(text.find(stop), std::string::npos);
    const size_t decoded = engine.tokenizer()->decode(tokens, true).size();
    if (!d.finished) {
      EXPECT_LE(text.size(), decoded > holdback ? decoded - holdback : 0);
    }
  }
}

TEST_F(RequestDeltas, AnAbortedRequestEndsWithWhatItHad) {
  LLMEngine engine(config());
  SamplingParams params = greedy_and_seeded(50)[0];
  const int64_t id = engine.add_request(Prompt::from_tokens(prompts_[0]), params);
  std::vector<RequestDelta> list;
  for (int i = 0; i < 4; ++i)
    for (RequestDelta& d : engine.step_deltas()) list.push_back(std::move(d));
  engine.abort(id);
  while (!engine.is_finished())
    for (RequestDelta& d : engine.step_deltas()) list.push_back(std::move(d));
  ASSERT_FALSE(list.empty());
  EXPECT_TRUE(list.back().finished);
  EXPECT_EQ(list.back().finish_reason, "abort");
  const RequestOutput got = sum(list);
  EXPECT_EQ(got.token_ids.size(), 4u);
  EXPECT_EQ(got.text, engine.tokenizer()->decode(got.token_ids, true));
  EXPECT_EQ(engine.stats().num_free_kv_blocks, engine.stats().num_kv_blocks);
}

TEST_F(RequestDeltas, StatsShowLoadAndPrefixCacheHits) {
  LLMEngine engine(config());
  const EngineStats idle = engine.stats();
  EXPECT_EQ(idle.num_kv_blocks, 40);
  EXPECT_EQ(idle.num_free_kv_blocks, 40);
  EXPECT_EQ(idle.kv_cache_usage(), 0.0);
  SamplingParams params = greedy_and_seeded(4)[0];
  params.prompt_logprobs.reset();                    // it needs every prompt token computed: no prefix-cache hits then
  const std::vector<int32_t>& prompt = prompts_[1];  // 50 tokens: 3 full blocks of 16
  engine.add_request(Prompt::from_tokens(prompt), params);
  engine.add_request(Prompt::from_tokens(prompt), params);
  EXPECT_EQ(engine.stats().num_waiting, 2);
  engine.step_deltas();  // the first prompt's first chunk
  const EngineStats busy = engine.stats();
  EXPECT_EQ(busy.num_running + busy.num_waiting, 2);
  EXPECT_GT(busy.kv_cache_usage(), 0.0);
  std::map<int64_t, RequestDelta> last;
  while (!engine.is_finished())
    for (RequestDelta& d : engine.step_deltas()) last[d.request_id] = std::move(d);
  // The second request came in while the first was prefilling: its prompt's full blocks were cached by the time
  // it was scheduled, or it found none (chunks of one step share none); either way the counters agree.
  const EngineStats done = engine.stats();
  EXPECT_EQ(done.num_free_kv_blocks, 40);
  EXPECT_EQ(done.num_running + done.num_waiting, 0);
  EXPECT_EQ(done.prefix_cache_hit_tokens,
            last.at(0).metrics.num_cached_prompt_tokens + last.at(1).metrics.num_cached_prompt_tokens);
  engine.add_request(Prompt::from_tokens(prompt), params);  // after both: the prompt's 3 full blocks are cached
  while (!engine.is_finished())
    for (RequestDelta& d : engine.step_deltas()) last[d.request_id] = std::move(d);
  EXPECT_EQ(last.at(2).metrics.num_cached_prompt_tokens, 48);
  EXPECT_EQ(engine.stats().prefix_cache_hit_tokens, done.prefix_cache_hit_tokens + 48);
  EXPECT_GT(engine.stats().prefix_cache_queried_tokens, done.prefix_cache_queried_tokens);
}

}  // namespace
}  // namespace nanovllm
