#pragma once
// Mean and percentiles of a set of latencies, as a serving benchmark reports them.
#include <cstddef>
#include <vector>

namespace nanovllm::cli {

// The p-th percentile (0..100) with linear interpolation between the closest ranks (numpy's default), so
// numbers compare with Python benchmarks'. 0 for no values.
double percentile(std::vector<double> values, double p);

struct LatencySummary {
  size_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;  // all 0 for no values

  static LatencySummary of(const std::vector<double>& values);
};

}  // namespace nanovllm::cli
