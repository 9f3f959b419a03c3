#include "server/metrics.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>

namespace nanovllm::server {

namespace {
// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py), so that dashboards made for vLLM read ours alike.
const std::vector<double> kTimeToFirstTokenBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                                      0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                                      20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kInterTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                       0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                                    5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// Prometheus numbers: the shortest text that reads back as the same double ("0.005", "2560", "1e-06").
std::string number(double v) {
  std::array<char, 32> text{};
  const auto result = std::to_chars(text.data(), text.data() + text.size(), v);
  return {text.data(), result.ptr};
}

// A label value with \\, \" and \n escaped, as the text format requires.
std::string label_value(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

double seconds(EngineClock::time_point from, EngineClock::time_point to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name + "{" + labels + "} " + number(value) + "\n";
}
}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();  // le: value <= bound
  ++counts_[static_cast<size_t>(bucket)];
  sum_ += value;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string& out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_("model_name=\"" + label_value(model_name) + "\""),
      finished_{{"stop", 0}, {"length", 0}, {"abort", 0}},
      time_to_first_token_(kTimeToFirstTokenBuckets),
      inter_token_latency_(kInterTokenLatencyBuckets),
      e2e_request_latency_(kRequestLatencyBuckets),
      request_queue_time_(kRequestLatencyBuckets) {}

void ServerMetrics::record(const RequestDelta& delta, std::optional<EngineClock::time_point>& last_token_time) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += delta.prompt_token_ids.size();  // the first delta carries them
  if (!delta.token_ids.empty()) {
    generation_tokens_ += delta.token_ids.size();
    if (last_token_time) inter_token_latency_.observe(seconds(*last_token_time, delta.time));
    else time_to_first_token_.observe(seconds(delta.metrics.arrival_time, delta.time));
    last_token_time = delta.time;
  }
  if (!delta.finished || !delta.error.empty()) return;  // a rejected request never ran
  ++finished_[delta.finish_reason];
  e2e_request_latency_.observe(seconds(delta.metrics.arrival_time, delta.time));
  if (delta.metrics.first_scheduled_time) request_queue_time_.observe(delta.metrics.queue_seconds());
}

void ServerMetrics::record_abandoned() {
  std::lock_guard lock(mutex_);
  ++finished_["abort"];
}

std::string ServerMetrics::render(const EngineStats& stats) const {
  std::string out;
  const auto gauge = [&](const char* name, const char* help, double value) {
    header(out, std::string("nanovllm:") + name, "gauge", help);
    sample(out, std::string("nanovllm:") + name, labels_, value);
  };
  const auto counter = [&](const char* name, const char* help, double value) {
    const std::string full = std::string("nanovllm:") + name;
    header(out, full, "counter", help);
    sample(out, full + "_total", labels_, value);
  };
  gauge("num_requests_running", "Number of requests in model execution batches.", stats.num_running);
  gauge("num_requests_waiting", "Number of requests waiting to be processed.", stats.num_waiting);
  gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", stats.kv_cache_usage());
  counter("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
          static_cast<double>(stats.prefix_cache_queried_tokens));
  counter("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
          static_cast<double>(stats.prefix_cache_hit_tokens));
  counter("num_preemptions", "Cumulative number of preemptions from the engine.",
          static_cast<double>(stats.num_preemptions));

  std::lock_guard lock(mutex_);
  counter("prompt_tokens", "Number of prefill tokens processed.", static_cast<double>(prompt_tokens_));
  counter("generation_tokens", "Number of generation tokens processed.", static_cast<double>(generation_tokens_));
  header(out, "nanovllm:request_success", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, count] : finished_)
    sample(out, "nanovllm:request_success_total", labels_ + ",finished_reason=\"" + label_value(reason) + "\"",
           static_cast<double>(count));
  const auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    const std::string full = std::string("nanovllm:") + name;
    header(out, full, "histogram", help);
    h.render(full, labels_, out);
  };
  histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", time_to_first_token_);
  histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", inter_token_latency_);
  histogram("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2e_request_latency_);
  histogram("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", request_queue_time_);
  return out;
}

}  // namespace nanovllm::server
