#include "engine/progress_bar.h"

#include <unistd.h>

namespace nanovllm {

ProgressBar::ProgressBar(int total, bool enabled) : total_(total), enabled_(enabled && isatty(STDERR_FILENO)) {
  if (enabled_) draw();
}

ProgressBar::~ProgressBar() {
  if (enabled_) std::fputc('\n', stderr);
}

void ProgressBar::update(int newly_finished, bool is_prefill, int num_tokens, double seconds) {
  done_ += newly_finished;
  if (num_tokens > 0 && seconds > 0) (is_prefill ? prefill_tps_ : decode_tps_) = num_tokens / seconds;
  if (enabled_) draw();
}

void ProgressBar::draw() {
  const int width = 30;
  const int filled = total_ > 0 ? done_ * width / total_ : width;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\rGenerating [%s] %d/%d  Prefill: %.0f tok/s  Decode: %.0f tok/s ", bar.c_str(), done_,
               total_, prefill_tps_, decode_tps_);
  std::fflush(stderr);
}

}  // namespace nanovllm
