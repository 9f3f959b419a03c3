#include "bench_serve/serve_report.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace nanovllm::cli {

namespace {
std::vector<double> in_ms(const std::vector<double>& seconds) {
  std::vector<double> ms(seconds.size());
  std::transform(seconds.begin(), seconds.end(), ms.begin(), [](double s) { return s * 1e3; });
  return ms;
}

std::string format(const char* pattern, auto... values) {
  char line[256];
  std::snprintf(line, sizeof line, pattern, values...);
  return line;
}

void add_latency_json(nlohmann::ordered_json& j, const std::string& name, const LatencySummary& s) {
  j["mean_" + name + "_ms"] = s.mean;
  j["median_" + name + "_ms"] = s.p50;
  j["p90_" + name + "_ms"] = s.p90;
  j["p99_" + name + "_ms"] = s.p99;
}
}  // namespace

ServeReport ServeReport::of(const std::vector<RequestOutcome>& outcomes, double duration_s) {
  ServeReport r;
  r.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  std::map<std::string, int> errors;
  for (const RequestOutcome& o : outcomes) {
    if (o.state == RequestOutcome::State::kUnfinished) {
      ++r.unfinished;
    } else if (o.state == RequestOutcome::State::kFailed) {
      ++r.failed;
      ++errors[o.error];
    } else {
      ++r.completed;
      r.input_tokens += o.prompt_tokens;
      r.output_tokens += o.output_tokens;
      ttft.push_back(o.ttft_s);
      e2el.push_back(o.latency_s);
      itl.insert(itl.end(), o.itl_s.begin(), o.itl_s.end());
      // One output token has no time per token after the first.
      if (o.output_tokens > 1) tpot.push_back((o.latency_s - o.ttft_s) / (o.output_tokens - 1));
    }
  }
  if (duration_s > 0) {
    r.request_throughput = r.completed / duration_s;
    r.input_throughput = static_cast<double>(r.input_tokens) / duration_s;
    r.output_throughput = static_cast<double>(r.output_tokens) / duration_s;
  }
  r.ttft_ms = LatencySummary::of(in_ms(ttft));
  r.tpot_ms = LatencySummary::of(in_ms(tpot));
  r.itl_ms = LatencySummary::of(in_ms(itl));
  r.e2el_ms = LatencySummary::of(in_ms(e2el));
  r.errors.assign(errors.begin(), errors.end());
  std::stable_sort(r.errors.begin(), r.errors.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return r;
}

std::string ServeReport::text() const {
  std::string out = format("completed requests:      %d\n", completed);
  out += format("failed requests:         %d\n", failed);
  constexpr size_t kReasonsShown = 5;
  for (size_t i = 0; i < std::min(errors.size(), kReasonsShown); ++i)
    out += format("  %6d x %s\n", errors[i].second, errors[i].first.c_str());
  if (errors.size() > kReasonsShown) out += format("  (and %zu other reasons)\n", errors.size() - kReasonsShown);
  if (unfinished > 0) out += format("unfinished (interrupted): %d\n", unfinished);
  out += format("duration:                %.2f s\n", duration_s);
  out += format("request throughput:      %.2f req/s\n", request_throughput);
  out += format("input tokens:            %lld (%.1f tok/s)\n", input_tokens, input_throughput);
  out += format("output tokens:           %lld (%.1f tok/s)\n", output_tokens, output_throughput);
  out += format("%-25s %10s %10s %10s %10s\n", "latency (ms)", "mean", "p50", "p90", "p99");
  const auto row = [&](const char* name, const LatencySummary& s) {
    out += format("%-25s %10.2f %10.2f %10.2f %10.2f\n", name, s.mean, s.p50, s.p90, s.p99);
  };
  row("TTFT (first token)", ttft_ms);
  row("TPOT (per output token)", tpot_ms);
  row("ITL (between chunks)", itl_ms);
  row("E2EL (whole request)", e2el_ms);
  return out;
}

nlohmann::ordered_json ServeReport::json() const {
  nlohmann::ordered_json j;
  j["completed"] = completed;
  j["failed"] = failed;
  j["unfinished"] = unfinished;
  j["duration"] = duration_s;
  j["total_input_tokens"] = input_tokens;
  j["total_output_tokens"] = output_tokens;
  j["request_throughput"] = request_throughput;
  j["input_throughput"] = input_throughput;
  j["output_throughput"] = output_throughput;
  add_latency_json(j, "ttft", ttft_ms);
  add_latency_json(j, "tpot", tpot_ms);
  add_latency_json(j, "itl", itl_ms);
  add_latency_json(j, "e2el", e2el_ms);
  j["errors"] = nlohmann::ordered_json::object();
  for (const auto& [reason, count] : errors) j["errors"][reason] = count;
  return j;
}

}  // namespace nanovllm::cli
