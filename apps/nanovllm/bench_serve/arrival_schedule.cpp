#include "bench_serve/arrival_schedule.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm::cli {

std::vector<double> poisson_arrivals(int count, double rate, uint64_t seed) {
  if (!(rate > 0)) throw InvalidInput("--request-rate must be > 0 (or inf), got " + std::to_string(rate));
  std::vector<double> times(std::max(count, 0), 0.0);
  if (std::isinf(rate)) return times;
  // mt19937_64's output is fixed by the standard and the uniform-to-exponential step is written out here
  // (std::exponential_distribution differs between standard libraries), so a seed means the same schedule
  // everywhere.
  std::mt19937_64 random(seed);
  double t = 0;
  for (int i = 1; i < count; ++i) {
    const double uniform = static_cast<double>(random() >> 11) * 0x1.0p-53;  // in [0, 1)
    t += -std::log1p(-uniform) / rate;
    times[i] = t;
  }
  return times;
}

double parse_request_rate(std::string_view text) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  double rate = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), rate);
  if (error != std::errc() || end != text.data() + text.size() || !(rate > 0) || std::isinf(rate))
    throw InvalidInput("--request-rate must be a number of requests per second > 0 or 'inf', got " + quoted_text(text));
  return rate;
}

}  // namespace nanovllm::cli
