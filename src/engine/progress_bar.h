#pragma once
// Progress of LLM::generate on stderr. On a terminal, nano-vLLM's tqdm-style line redrawn after every step:
// finished requests, elapsed time and ETA, prefill and decode throughput over the whole run so far. Where
// stderr is not a terminal (a log file, CI) the same facts as a plain line every few seconds. Both close
// with a summary line.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace nanovllm {

// What one engine step did.
struct StepProgress {
  int finished_requests = 0;
  int64_t finished_output_tokens = 0;  // output tokens of the requests that finished in the step
  bool is_prefill = false;
  int num_tokens = 0;  // tokens computed (prefill) or sequences decoded
  double seconds = 0.0;
};

// Engine counters over the run, for the summary line.
struct RunCounters {
  int64_t prefix_cache_queried_tokens = 0, prefix_cache_hit_tokens = 0;
  int64_t preemptions = 0;
  // The counts between an earlier reading and this one (an engine's counters run over its lifetime).
  RunCounters since(const RunCounters& earlier) const {
    return {prefix_cache_queried_tokens - earlier.prefix_cache_queried_tokens,
            prefix_cache_hit_tokens - earlier.prefix_cache_hit_tokens, preemptions - earlier.preemptions};
  }
};

class ProgressBar {
 public:
  enum class Style { Off, Terminal, Log };
  using Clock = std::function<double()>;  // seconds, any origin

  // Terminal or Log by whether stderr is a terminal; Off when !enabled.
  ProgressBar(int total, bool enabled);
  ProgressBar(int total, Style style, std::FILE* out, Clock now, double log_interval_seconds = 5.0);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(const StepProgress& step);
  // The summary line: requests, tokens, output tok/s, prefix-cache hit rate, preemptions.
  void finish(const RunCounters& counters);

  // The status without decoration: "12/256 requests [00:10<03:20], prefill 4884 tok/s, decode 1234 tok/s".
  std::string status() const;

 private:
  void draw();
  double elapsed() const { return now_() - start_; }

  int total_ = 0, done_ = 0;
  Style style_ = Style::Off;
  std::FILE* out_ = nullptr;
  Clock now_;
  double log_interval_ = 5.0;
  double start_ = 0.0, last_log_ = 0.0;
  bool line_open_ = false;  // a terminal line was drawn and not yet ended
  bool finished_ = false;
  int64_t prefill_tokens_ = 0, decode_tokens_ = 0, output_tokens_ = 0;
  double prefill_seconds_ = 0.0, decode_seconds_ = 0.0;
};

}  // namespace nanovllm
