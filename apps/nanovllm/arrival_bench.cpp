#include "arrival_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>
#include <unordered_map>

#include "bench_serve/latency_stats.h"
#include "engine/llm_engine.h"

namespace nanovllm::cli {

namespace {
using Clock = EngineClock;
double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Token ids of prompt number `index`: a different sequence for each, so no prompt finds another's prefix in
// the cache, within the ids every Qwen3 vocabulary (and the tests' small ones) holds.
std::vector<int32_t> prompt_tokens(int index, int length, int vocab) {
  std::vector<int32_t> ids(length);
  uint32_t state = 2654435761u * static_cast<uint32_t>(index + 1);
  const uint32_t range = static_cast<uint32_t>(std::min(vocab, 10000));
  for (int32_t& id : ids) {
    state = state * 1664525u + 1013904223u;
    id = static_cast<int32_t>((state >> 8) % range);
  }
  return ids;
}

struct StreamState {
  std::optional<Clock::time_point> last_token;
  int last_step = 0;
  bool finished = false;
};

struct ArrivalState {
  int64_t id = -1;
  Clock::time_point due;
  bool first_token = false;
};

// Steps the engine; counts the step's kind.
std::vector<RequestDelta> step(LLMEngine& engine, ArrivalReport& r) {
  std::vector<RequestDelta> deltas = engine.step_deltas();
  const StepStats& s = engine.last_step();
  if (s.num_tokens > 0) {
    if (!s.is_prefill) ++r.decode_steps;
    else if (s.num_decode_rows > 0) ++r.mixed_steps;
    else ++r.prefill_steps;
  }
  return deltas;
}
}  // namespace

ArrivalReport run_arrival(LLMEngine& engine, const ArrivalShape& shape) {
  const int vocab = engine.model_config().vocab_size;
  SamplingParams stream_params;
  stream_params.temperature = 0.6f;
  stream_params.ignore_eos = true;
  stream_params.max_tokens = engine.config().max_model_len - shape.stream_prompt_len;
  std::unordered_map<int64_t, StreamState> streams;
  for (int i = 0; i < shape.streams; ++i)
    streams[engine.add_request(Prompt::from_tokens(prompt_tokens(i, shape.stream_prompt_len, vocab)), stream_params)] =
        {};

  ArrivalReport r;
  int steps = 0;
  // Until every stream decodes, then a few decode steps more so the window starts in the steady state (the
  // loop also ends should the streams end first: a tiny max_model_len).
  for (int decoding = 0, extra = 0; (decoding < shape.streams || extra < 8) && !engine.is_finished();) {
    const std::vector<RequestDelta> deltas = engine.step_deltas();
    ++steps;
    if (decoding == shape.streams) ++extra;
    for (const RequestDelta& d : deltas) {
      StreamState& s = streams.at(d.request_id);
      if (!d.token_ids.empty() && !s.last_token) ++decoding;
      if (!d.token_ids.empty()) s.last_token = d.time, s.last_step = steps;
      if (d.finished) s.finished = true;
    }
  }

  SamplingParams arrival_params;
  arrival_params.temperature = 0.6f;
  arrival_params.ignore_eos = true;
  arrival_params.max_tokens = shape.arrival_output_len;
  std::vector<ArrivalState> arrivals(shape.arrivals);
  std::unordered_map<int64_t, ArrivalState*> arrival_of;
  const auto start = Clock::now();
  const auto interval = std::chrono::milliseconds(shape.interval_ms);
  int arrived = 0, arrivals_done = 0;
  while (arrivals_done < shape.arrivals) {
    const auto now = Clock::now();
    for (; arrived < shape.arrivals && now >= start + arrived * interval; ++arrived) {
      ArrivalState& a = arrivals[arrived];
      a.due = start + arrived * interval;
      a.id = engine.add_request(
          Prompt::from_tokens(prompt_tokens(shape.streams + arrived, shape.arrival_prompt_len, vocab)), arrival_params);
      arrival_of[a.id] = &a;
    }
    if (engine.is_finished()) {  // nothing to run until the next arrival (the streams ended early)
      std::this_thread::sleep_until(start + arrived * interval);
      continue;
    }
    const std::vector<RequestDelta> deltas = step(engine, r);
    ++steps;
    for (const RequestDelta& d : deltas) {
      if (auto it = arrival_of.find(d.request_id); it != arrival_of.end()) {
        ArrivalState& a = *it->second;
        if (!d.token_ids.empty() && !a.first_token) {
          a.first_token = true;
          r.first_token_s.push_back(seconds_between(a.due, d.time));
        }
        if (d.finished) ++arrivals_done;
        continue;
      }
      StreamState& s = streams.at(d.request_id);
      if (!d.token_ids.empty()) {
        if (s.last_token) r.inter_token_s.push_back(seconds_between(*s.last_token, d.time));
        r.max_steps_between_tokens = std::max(r.max_steps_between_tokens, steps - s.last_step);
        s.last_token = d.time, s.last_step = steps;
      }
      if (d.finished && !s.finished) s.finished = true, ++r.streams_finished_early;
    }
  }
  r.seconds = seconds_between(start, Clock::now());
  for (const auto& [id, s] : streams)
    if (!s.finished) engine.abort(id);
  while (!engine.is_finished()) engine.step_deltas();
  return r;
}

std::string format_arrival_report(const std::string& policy, const ArrivalReport& r) {
  char line[512];
  std::snprintf(line, sizeof line,
                "%-14s ITL p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms (%d steps)  |  TTFT p50 %7.1f ms  p99 %7.1f ms  "
                "|  steps: %d decode, %d mixed, %d prefill%s",
                policy.c_str(), 1e3 * percentile(r.inter_token_s, 50), 1e3 * percentile(r.inter_token_s, 99),
                1e3 * percentile(r.inter_token_s, 100), r.max_steps_between_tokens,
                1e3 * percentile(r.first_token_s, 50), 1e3 * percentile(r.first_token_s, 99), r.decode_steps,
                r.mixed_steps, r.prefill_steps,
                r.streams_finished_early > 0 ? "  (some streams ended early: raise --max-model-len)" : "");
  return line;
}

}  // namespace nanovllm::cli
