#pragma once
// The server's /metrics in Prometheus' text format, with vLLM's metric names under the "nanovllm:" prefix:
// gauges and counters the engine keeps (EngineStats), token counters and latency histograms the server adds
// up from each request's deltas. Thread-safe; recording a delta is a few additions under one mutex.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nanovllm/engine_stats.h"
#include "nanovllm/outputs.h"

namespace nanovllm::server {

// A Prometheus histogram: cumulative counts per upper bound ("le"), their sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The _bucket, _sum and _count lines of `name` with `labels` (`key="value"` pairs, comma-separated).
  void render(const std::string& name, const std::string& labels, std::string& out) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, not cumulative; the last one is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  // One request's next delta (in order): counts its tokens and, at its first token and its end, its latencies.
  // `last_token_time` is the request's own state, kept by the caller between deltas.
  void record(const RequestDelta& delta, std::optional<EngineClock::time_point>& last_token_time);
  // A request whose client left before its end: counted as aborted (its last delta is never read).
  void record_abandoned();
  // The text exposition, engine gauges as of `stats`.
  std::string render(const EngineStats& stats) const;

 private:
  const std::string labels_;  // model_name="..."
  mutable std::mutex mutex_;
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
  std::map<std::string, uint64_t> finished_;  // by finish reason
  Histogram time_to_first_token_, inter_token_latency_, e2e_request_latency_, request_queue_time_;
};

}  // namespace nanovllm::server
