#pragma once
// When each request of a serving benchmark is sent: a Poisson process (exponential gaps with mean 1/rate),
// drawn from a seeded generator so that a run can be repeated, or all at once for an infinite rate.
#include <cstdint>
#include <string_view>
#include <vector>

namespace nanovllm::cli {

// Seconds from the start at which each of `count` requests is sent: the first at 0, the others after
// exponential gaps. rate = +infinity sends all at 0. Throws InvalidInput for a rate that is not > 0.
std::vector<double> poisson_arrivals(int count, double rate, uint64_t seed);

// "inf" or a positive number of requests per second; InvalidInput names the bad text otherwise.
double parse_request_rate(std::string_view text);

}  // namespace nanovllm::cli
