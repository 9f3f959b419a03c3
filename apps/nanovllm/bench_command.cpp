#include "bench_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "arrival_bench.h"
#include "bench_workload.h"
#include "common/error.h"
#include "engine/llm_engine.h"
#include "engine_options.h"

namespace nanovllm::cli {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct BenchArgs {
  EngineOptions engine;
  std::string workload;
  bool latency = false, prefill = false, arrival = false, long_context = false;
  ArrivalShape arrival_shape;
  int num_prompts = -1;
  int batch_size = 1, input_len = 128, output_len = 256;  // --latency shape
};

// `--latency` notes decode steps that held less than this share of the batch on average.
constexpr double kFullBatchShare = 0.95;

// Where a run's time went: steps by kind, as the engine timed them.
struct RunTimes {
  double first_token = 0, total = 0;  // first_token: the end of the last prefill step before any decode step
  int prefill_steps = 0, decode_steps = 0;
  int mixed_steps = 0;  // of prefill_steps: steps that also decoded running sequences
  long long prefill_tokens = 0, decode_tokens = 0;
  double prefill_s = 0, decode_s = 0;
  double decode_host_s = 0;  // of decode_s, host work with the device idle (before launch, after the run)
  double decode_step_s() const { return decode_s / std::max(decode_steps, 1); }
  double decode_host_step_s() const { return decode_host_s / std::max(decode_steps, 1); }
};

// Runs every request to the end.
RunTimes run_all(LLMEngine& engine, const std::vector<std::vector<int32_t>>& prompts,
                 const std::vector<SamplingParams>& params) {
  const auto start = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) engine.add_request(Prompt::from_tokens(prompts[i]), params[i]);
  RunTimes t;
  t.first_token = -1.0;
  while (!engine.is_finished()) {
    engine.step();
    const StepStats& s = engine.last_step();
    if (s.num_tokens == 0) continue;
    if (s.is_prefill) {
      ++t.prefill_steps, t.prefill_tokens += s.num_tokens, t.prefill_s += s.seconds;
      if (s.num_decode_rows > 0) ++t.mixed_steps;
      if (t.decode_steps == 0) t.first_token = seconds_since(start);  // a prompt's last chunk samples its first token
    } else {
      ++t.decode_steps, t.decode_tokens += s.num_tokens, t.decode_s += s.seconds;
      t.decode_host_s += s.host_before_launch + s.host_after_run;
    }
  }
  t.total = seconds_since(start);
  if (t.first_token < 0) t.first_token = t.total;
  return t;
}

// One short request first, as nano-vLLM's bench.py does: the first steps' one-time work stays out of the numbers.
void warm_up(LLMEngine& engine) {
  SamplingParams warm;
  warm.max_tokens = 2;
  run_all(engine, {{1, 2, 3, 4, 5, 6, 7, 8}}, {warm});
}

// The bytes a decode step cannot avoid reading: all weights once per step, and every cached K/V byte of
// every sequence in it (summed over the tensor-parallel ranks, replicated KV heads included: the cache's own
// bytes per token). Over the measured read bandwidth this is the workload's floor.
double workload_floor_bytes(const BenchWorkload& w, const LLMEngine& engine) {
  const double kv_per_token = static_cast<double>(engine.kv_cache_bytes()) /
                              (static_cast<double>(engine.num_kvcache_blocks()) * engine.config().kvcache_block_size);
  double kv = 0;
  int longest = 0;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    const double p = static_cast<double>(w.prompts[i].size()), o = w.max_tokens[i];
    // Decode of output token j (j = 1..o-1) attends over p + j cached tokens.
    kv += kv_per_token * ((o - 1) * p + (o - 1) * o / 2.0);
    longest = std::max(longest, w.max_tokens[i]);
  }
  return kv + static_cast<double>(engine.weight_bytes()) * (longest - 1);
}

// Streaming under arrival, under each step policy in turn (one engine each, made and freed in turn).
int run_arrival_bench(const BenchArgs& a) {
  const ArrivalShape& shape = a.arrival_shape;
  if (shape.streams < 1 || shape.stream_prompt_len < 1 || shape.arrivals < 1 || shape.arrival_prompt_len < 1 ||
      shape.arrival_output_len < 1 || shape.interval_ms < 0)
    throw InvalidInput("--arrival: stream and arrival counts and lengths must be >= 1, the interval >= 0");
  EngineConfig config = a.engine.resolve();
  config.max_model_len = std::max(config.max_model_len, shape.arrival_prompt_len + shape.arrival_output_len);
  std::printf(
      "arrival: %d streams decoding (%d-token prompts); %d prompts of %d tokens (%d output tokens) every %d ms; "
      "max_num_batched_tokens %d\n",
      shape.streams, shape.stream_prompt_len, shape.arrivals, shape.arrival_prompt_len, shape.arrival_output_len,
      shape.interval_ms, config.max_num_batched_tokens);
  for (StepPolicy policy : {StepPolicy::PrefillFirst, StepPolicy::DecodeFirst}) {
    config.step_policy = policy;
    LLMEngine engine(config);
    warm_up(engine);
    const ArrivalReport r = run_arrival(engine, shape);
    std::printf("%s\n", format_arrival_report(to_string(policy), r).c_str());
    std::fflush(stdout);
  }
  return 0;
}

int run_bench(const BenchArgs& a) {
  if (a.arrival) return run_arrival_bench(a);
  if (a.batch_size < 1 || a.input_len < 1 || a.output_len < 2)
    throw InvalidInput("--batch-size and --input-len must be >= 1 and --output-len >= 2");
  EngineConfig config = a.engine.resolve();
  BenchWorkload w;
  if (!a.latency && !a.prefill) {
    if (a.long_context && !a.workload.empty()) throw InvalidInput("--long-context and --workload: choose one");
    w = a.long_context       ? long_context_bench_workload()
        : a.workload.empty() ? nanovllm_bench_workload()
                             : read_bench_workload(a.workload);
    w.keep_first(a.num_prompts);
    config.max_model_len = std::max(config.max_model_len, w.max_model_len);  // the workload's own setting
  }
  const auto start = Clock::now();
  LLMEngine engine(config);
  const std::string device = engine.runner_backend().device_name();
  std::printf("device: %s (%s)\nweights: %.2f GiB, KV cache: %d blocks (%.2f GiB), startup %.2f s\n", device.c_str(),
              engine.backend_name().c_str(), engine.weight_bytes() / double(1 << 30), engine.num_kvcache_blocks(),
              engine.kv_cache_bytes() / double(1 << 30), engine.startup_seconds());

  warm_up(engine);  // its time to first token includes startup
  std::printf("startup to first token: %.2f s\n", seconds_since(start));

  if (a.latency) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.ignore_eos = true;
    p.max_tokens = a.output_len;
    std::vector<std::vector<int32_t>> prompts(a.batch_size, std::vector<int32_t>(a.input_len));
    for (int s = 0; s < a.batch_size; ++s)
      for (int i = 0; i < a.input_len; ++i) prompts[s][i] = (s * 7919 + i * 131 + 7) % 10000;
    const RunTimes t = run_all(engine, prompts, std::vector<SamplingParams>(a.batch_size, p));
    // A decode step gives each running sequence one token (the first came from the prefill). Sequences whose
    // prompts finish early decode beside the later prompts' chunks (mixed steps, counted as prefill) and finish
    // early too, so with a short output the decode steps hold fewer than the batch.
    const double step_s = t.decode_step_s();
    const double rows = static_cast<double>(t.decode_tokens) / std::max(t.decode_steps, 1);
    std::printf(
        "latency: batch %d, prompt %d, output %d: %.3f ms/token decode (%.1f tok/s; %.3f ms of it host work before "
        "launch and after the run), %.2f ms to first token\n",
        a.batch_size, a.input_len, a.output_len, step_s * 1e3, t.decode_tokens / std::max(t.decode_s, 1e-9),
        1e3 * t.decode_host_step_s(), t.first_token * 1e3);
    if (rows < kFullBatchShare * a.batch_size)
      std::printf(
          "note: the decode steps held %.1f sequences on average, not %d: the rest were still in prefill or done; "
          "a longer --output-len measures the whole batch\n",
          rows, a.batch_size);
    return 0;
  }
  if (a.prefill) {
    SamplingParams p;
    p.max_tokens = 1;
    std::vector<std::vector<int32_t>> prompts(16, std::vector<int32_t>(1024));
    for (int s = 0; s < 16; ++s)
      for (int i = 0; i < 1024; ++i) prompts[s][i] = (s * 7919 + i * 131) % 10000;  // no shared prefixes
    const double total = run_all(engine, prompts, std::vector<SamplingParams>(16, p)).total;
    std::printf("prefill: 16 x 1024 tokens in %.3f s: %.0f prompt tok/s\n", total, 16 * 1024 / total);
    return 0;
  }

  std::vector<SamplingParams> params(w.prompts.size());
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].temperature = w.temperature;
    params[i].ignore_eos = w.ignore_eos;
    params[i].max_tokens = w.max_tokens[i];
  }
  const long long total_tokens = w.total_output_tokens();
  const RunTimes t = run_all(engine, w.prompts, params);
  const double total = t.total;
  std::printf("workload: %zu prompts, %lld output tokens in %.2f s: %.0f tok/s (preemptions: %lld)\n", w.prompts.size(),
              total_tokens, total, total_tokens / total, static_cast<long long>(engine.num_preemptions()));
  std::printf(
      "  prefill: %d steps (%d mixed with decode rows), %lld tokens, %.2f s (%.0f tok/s); decode: %d steps, %lld "
      "tokens, %.2f s (%.2f ms/step, %.3f ms of it host work before launch and after the run); other %.2f s\n",
      t.prefill_steps, t.mixed_steps, t.prefill_tokens, t.prefill_s, t.prefill_tokens / std::max(t.prefill_s, 1e-9),
      t.decode_steps, t.decode_tokens, t.decode_s, 1e3 * t.decode_step_s(), 1e3 * t.decode_host_step_s(),
      total - t.prefill_s - t.decode_s);
  if (Backend& backend = engine.runner_backend(); backend.is_device()) {
    const double gbs = backend.measure_read_bandwidth_gbs(size_t{4} << 30);  // over a 4 GiB buffer
    // Tensor-parallel ranks read their shards at once: the floor divides by the number of GPUs.
    const int gpus = config.tensor_parallel_size;
    const double floor_bytes = workload_floor_bytes(w, engine);
    const double floor_s = floor_bytes / (gbs * 1e9 * gpus);
    std::printf(
        "memory floor: %.2f TB at %.0f GB/s measured x %d GPU(s) = %.2f s; this run: %.1f%% of the floor's speed\n",
        floor_bytes / 1e12, gbs, gpus, floor_s, 100.0 * floor_s / total);
  }
  return 0;
}
}  // namespace

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd =
      app.add_subcommand("bench", "throughput (nano-vLLM's bench workload), --latency, --prefill or --arrival");
  args->engine.load_format = "dummy";
  args->engine.add_to(*cmd);
  cmd->add_option("--workload", args->workload,
                  "workload JSON (prompt_token_ids, max_tokens); default: nano-vLLM bench.py's, generated");
  cmd->add_flag("--long-context", args->long_context,
                "16 prompts of 16k-30k tokens, 256-1024 output tokens each (max_model_len 32768)");
  cmd->add_option("--num-prompts", args->num_prompts, "use only the first N prompts of the workload");
  cmd->add_flag("--latency", args->latency, "batch 1, 128-token prompt, 256 output tokens: ms per token");
  cmd->add_option("--batch-size", args->batch_size, "--latency: sequences decoded together")->capture_default_str();
  cmd->add_option("--input-len", args->input_len, "--latency: prompt tokens")->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "--latency: output tokens (>= 2)")->capture_default_str();
  cmd->add_flag("--prefill", args->prefill, "16 x 1024-token prompts: prompt tok/s");
  cmd->add_flag("--arrival", args->arrival,
                "streaming under arrival, each step policy in turn: inter-token latency of decoding streams "
                "while long prompts arrive, and the arrivals' time to first token");
  ArrivalShape& shape = args->arrival_shape;
  cmd->add_option("--arrival-streams", shape.streams, "--arrival: sequences decoding")->capture_default_str();
  cmd->add_option("--arrival-stream-prompt-len", shape.stream_prompt_len, "--arrival: their prompt tokens")
      ->capture_default_str();
  cmd->add_option("--arrivals", shape.arrivals, "--arrival: prompts that arrive")->capture_default_str();
  cmd->add_option("--arrival-prompt-len", shape.arrival_prompt_len, "--arrival: their prompt tokens")
      ->capture_default_str();
  cmd->add_option("--arrival-output-len", shape.arrival_output_len, "--arrival: their output tokens")
      ->capture_default_str();
  cmd->add_option("--arrival-interval-ms", shape.interval_ms, "--arrival: time between arrivals")
      ->capture_default_str();
  cmd->callback([args] { throw CLI::RuntimeError(run_bench(*args)); });
}

}  // namespace nanovllm::cli
