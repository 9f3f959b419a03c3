#pragma once
// `nanovllm bench --arrival`: streaming under arrival. A set of sequences decodes while long prompts arrive at a
// fixed interval; what the running streams feel (the gaps between their tokens) and what the arrivals wait for
// their first token show how a step policy shares the token budget between the two.
#include <string>
#include <vector>

namespace nanovllm {
class LLMEngine;
}

namespace nanovllm::cli {

struct ArrivalShape {
  int streams = 64;             // sequences decoding throughout
  int stream_prompt_len = 512;  // their prompts
  int arrivals = 10;            // prompts that arrive while they decode
  int arrival_prompt_len = 4096;
  int arrival_output_len = 16;
  int interval_ms = 200;  // between two arrivals
};

struct ArrivalReport {
  std::vector<double> inter_token_s;  // gaps between consecutive tokens of the running streams, in the window
  std::vector<double> first_token_s;  // of each arrival, from when it was due (a server's clock)
  int max_steps_between_tokens = 0;   // the longest run of steps a running stream waited, plus one
  int decode_steps = 0, mixed_steps = 0, prefill_steps = 0;
  int streams_finished_early = 0;  // ran out of max_tokens before the last arrival's first token
  double seconds = 0;              // from the first arrival to the last arrival's end
};

// The engine must be idle; it is idle again on return (the running streams are aborted at the end).
ArrivalReport run_arrival(LLMEngine& engine, const ArrivalShape& shape);

// One line for a policy's report: ITL p50/p99/max, TTFT p50/p99, steps by kind.
std::string format_arrival_report(const std::string& policy, const ArrivalReport& r);

}  // namespace nanovllm::cli
