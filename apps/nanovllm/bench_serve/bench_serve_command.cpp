#include "bench_serve/bench_serve_command.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>

#include "bench_serve/arrival_schedule.h"
#include "bench_serve/load_generator.h"
#include "bench_workload.h"
#include "common/error.h"

namespace nanovllm::cli {

namespace {
struct BenchServeArgs {
  std::string base_url = "http://127.0.0.1:8000";
  std::string request_rate = "inf";
  std::string workload, result_json;
  int num_prompts = -1;
  LoadOptions load;
};

// The completions endpoint takes token ids as its prompt; chat takes messages, which these workloads lack.
void check_endpoint(const std::string& endpoint) {
  if (!endpoint.starts_with('/') || !endpoint.ends_with("/completions") || endpoint.ends_with("/chat/completions"))
    throw InvalidInput(
        "--endpoint must be a completions path such as /v1/completions (the workloads are token ids, "
        "which chat endpoints do not take), got '" +
        endpoint + "'");
}

std::vector<ServeRequest> completion_requests(const BenchWorkload& w) {
  std::vector<ServeRequest> requests;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    ServeRequest& r = requests.emplace_back();
    r.body = {{"prompt", w.prompts[i]},
              {"max_tokens", w.max_tokens[i]},
              {"temperature", w.temperature},
              {"ignore_eos", w.ignore_eos},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}}};
    r.prompt_tokens = static_cast<int>(w.prompts[i].size());
  }
  return requests;
}

void write_result_json(const BenchServeArgs& a, const LoadRun& run, const ServeReport& report) {
  nlohmann::ordered_json j;
  j["base_url"] = a.base_url;
  j["endpoint"] = a.load.endpoint;
  j["model"] = run.model;
  j["request_rate"] = std::isinf(a.load.request_rate) ? nlohmann::ordered_json("inf")  // JSON has no infinity
                                                      : nlohmann::ordered_json(a.load.request_rate);
  j["max_concurrency"] = a.load.max_concurrency > 0 ? nlohmann::ordered_json(a.load.max_concurrency) : nullptr;
  j["num_prompts"] = run.outcomes.size();
  j["seed"] = a.load.seed;
  j.update(report.json());
  std::ofstream out(a.result_json);
  out << j.dump(2) << "\n";
  if (!out) throw InvalidInput("--result-json: cannot write '" + a.result_json + "'");
}

int run_bench_serve(BenchServeArgs& a) {
  a.load.server = BaseUrl::parse(a.base_url);
  a.load.request_rate = parse_request_rate(a.request_rate);
  check_endpoint(a.load.endpoint);
  BenchWorkload w = a.workload.empty() ? nanovllm_bench_workload() : read_bench_workload(a.workload);
  w.keep_first(a.num_prompts);
  const std::vector<ServeRequest> requests = completion_requests(w);
  std::printf("bench-serve: %zu requests to %s%s, request rate %s, max concurrency %s\n", requests.size(),
              a.base_url.c_str(), a.load.endpoint.c_str(), a.request_rate.c_str(),
              a.load.max_concurrency > 0 ? std::to_string(a.load.max_concurrency).c_str() : "none");
  std::fflush(stdout);
  const LoadRun run = run_load(a.load, requests);
  const ServeReport report = ServeReport::of(run.outcomes, run.duration_s);
  if (run.stopped_by_signal != 0)
    std::printf("stopped by %s: what completed until then\n", run.stopped_by_signal == SIGINT ? "SIGINT" : "SIGTERM");
  std::printf("model: %s\n%s", run.model.c_str(), report.text().c_str());
  if (!a.result_json.empty()) write_result_json(a, run, report);
  return run.stopped_by_signal != 0 ? 128 + run.stopped_by_signal : 0;
}
}  // namespace

void add_bench_serve_command(CLI::App& app) {
  auto args = std::make_shared<BenchServeArgs>();
  CLI::App* cmd =
      app.add_subcommand("bench-serve", "load an OpenAI-compatible server and report throughput, TTFT, TPOT, ITL");
  cmd->add_option("--base-url", args->base_url, "the server (plain http)")->capture_default_str();
  cmd->add_option("--model", args->load.model, "the requests' model; default: the first of GET /v1/models");
  cmd->add_option("--endpoint", args->load.endpoint, "the completions path")->capture_default_str();
  cmd->add_option("--request-rate", args->request_rate, "requests per second, Poisson arrivals; inf: all at once")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", args->load.max_concurrency, "at most N requests in flight (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--seed", args->load.seed, "seed of the arrival times")->capture_default_str();
  cmd->add_option("--workload", args->workload,
                  "workload JSON (prompt_token_ids, max_tokens); default: nano-vLLM bench.py's, generated");
  cmd->add_option("--num-prompts", args->num_prompts, "use only the first N prompts of the workload");
  cmd->add_option("--read-timeout", args->load.read_timeout_s, "seconds a request may wait for data before it fails")
      ->capture_default_str();
  cmd->add_option("--result-json", args->result_json, "also write the results to this JSON file");
  cmd->callback([args] { throw CLI::RuntimeError(run_bench_serve(*args)); });
}

}  // namespace nanovllm::cli
