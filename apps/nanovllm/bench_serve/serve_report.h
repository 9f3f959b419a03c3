#pragma once
// What a serving benchmark measured per request, and the summary it prints: throughput, and time to first
// token (TTFT), time per output token after the first (TPOT), inter-token latency (ITL, the gaps between
// streamed text chunks) and end-to-end latency (E2EL), each as mean and percentiles.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_serve/latency_stats.h"

namespace nanovllm::cli {

// One request: done (completed or failed) or still in flight when the run was stopped.
struct RequestOutcome {
  enum class State { kUnfinished, kCompleted, kFailed };
  State state = State::kUnfinished;
  std::string error;  // why it failed: short, the same text for the same cause so that failures group
  int prompt_tokens = 0, output_tokens = 0;
  double ttft_s = 0, latency_s = 0;  // from sending the request to the first text, and to the end
  std::vector<double> itl_s;         // the gaps between text chunks after the first
};

struct ServeReport {
  int completed = 0, failed = 0, unfinished = 0;
  double duration_s = 0;
  long long input_tokens = 0, output_tokens = 0;                               // of completed requests
  double request_throughput = 0, input_throughput = 0, output_throughput = 0;  // per second
  LatencySummary ttft_ms, tpot_ms, itl_ms, e2el_ms;
  std::vector<std::pair<std::string, int>> errors;  // each failure reason with its count, most frequent first

  static ServeReport of(const std::vector<RequestOutcome>& outcomes, double duration_s);
  // The report as lines of text for the terminal.
  std::string text() const;
  // The same numbers as JSON, with key names as vLLM's benchmark writes them where it has them.
  nlohmann::ordered_json json() const;
};

}  // namespace nanovllm::cli
