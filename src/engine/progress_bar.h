#pragma once
// nano-vLLM's tqdm line for generate(): finished requests, and the last prefill and decode throughput.
#include <cstdio>
#include <string>

namespace nanovllm {

class ProgressBar {
 public:
  ProgressBar(int total, bool enabled);
  ~ProgressBar();
  // After each engine step: how many requests finished, and the step's kind, tokens and seconds.
  void update(int newly_finished, bool is_prefill, int num_tokens, double seconds);

 private:
  void draw();

  int total_ = 0, done_ = 0;
  bool enabled_ = false;
  double prefill_tps_ = 0.0, decode_tps_ = 0.0;
};

}  // namespace nanovllm
