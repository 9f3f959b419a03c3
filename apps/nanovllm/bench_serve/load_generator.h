#pragma once
// A serving benchmark's driver: sends requests to an OpenAI-compatible server on a schedule (Poisson
// arrivals, or all at once), at most N in flight, all on the calling thread's Asio loop, and collects how
// each went. SIGINT / SIGTERM stop it early with what completed so far.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_serve/base_url.h"
#include "bench_serve/serve_report.h"

namespace nanovllm::cli {

struct LoadOptions {
  BaseUrl server;
  std::string endpoint = "/v1/completions";
  std::string model;  // the request's "model"; empty: the first of GET /v1/models
  double request_rate = std::numeric_limits<double>::infinity();  // requests per second
  int max_concurrency = 0;                                        // 0: no limit
  uint64_t seed = 0;                                              // of the arrival schedule
  double read_timeout_s = 600;                                    // a request that receives nothing for this long fails
  bool stop_on_signals = true;  // SIGINT / SIGTERM end the run early (tests leave them alone)
};

struct ServeRequest {
  nlohmann::ordered_json body;  // the request without "model", which the run fills in
  int prompt_tokens = 0;
};

struct LoadRun {
  std::string model;
  std::vector<RequestOutcome> outcomes;  // one per request, in the order given
  double duration_s = 0;                 // from the first send to the last answer (or the signal)
  int stopped_by_signal = 0;             // SIGINT or SIGTERM when the run was cut short, else 0
};

// Runs every request and returns how each went. Throws InvalidInput when the server cannot be resolved or
// (without a model) lists no model; failures of single requests are outcomes, never exceptions.
LoadRun run_load(const LoadOptions& options, const std::vector<ServeRequest>& requests);

}  // namespace nanovllm::cli
