#include "engine/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace nanovllm {

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ProgressBar::Style style_for_stderr(bool enabled) {
  if (!enabled) return ProgressBar::Style::Off;
  return isatty(STDERR_FILENO) ? ProgressBar::Style::Terminal : ProgressBar::Style::Log;
}

// tqdm's clock: mm:ss, or h:mm:ss from an hour on.
std::string clock_time(double seconds) {
  const long s = std::lround(std::max(seconds, 0.0));
  char text[32];
  if (s >= 3600) std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(text, sizeof text, "%02ld:%02ld", s / 60, s % 60);
  return text;
}

double rate(double amount, double seconds) { return seconds > 0 ? amount / seconds : 0.0; }
}  // namespace

ProgressBar::ProgressBar(int total, bool enabled)
    : ProgressBar(total, style_for_stderr(enabled), stderr, steady_seconds) {}

ProgressBar::ProgressBar(int total, Style style, std::FILE* out, Clock now, double log_interval_seconds)
    : total_(total), style_(style), out_(out), now_(std::move(now)), log_interval_(log_interval_seconds) {
  start_ = last_log_ = now_();
  if (style_ == Style::Terminal) draw();
}

ProgressBar::~ProgressBar() {
  if (line_open_) std::fputc('\n', out_);  // a run cut short by an exception still ends its line
}

void ProgressBar::update(const StepProgress& step) {
  done_ += step.finished_requests;
  output_tokens_ += step.finished_output_tokens;
  if (step.num_tokens > 0) {
    if (step.is_prefill) prefill_tokens_ += step.num_tokens, prefill_seconds_ += step.seconds;
    else decode_tokens_ += step.num_tokens, decode_seconds_ += step.seconds;
  }
  if (style_ == Style::Terminal) {
    draw();
  } else if (style_ == Style::Log && now_() - last_log_ >= log_interval_) {
    last_log_ = now_();
    std::fprintf(out_, "nanovllm: generating: %s\n", status().c_str());
    std::fflush(out_);
  }
}

std::string ProgressBar::status() const {
  const double t = elapsed();
  // ETA from the pace of finished requests, as tqdm does; unknown before the first one.
  const std::string eta = done_ > 0 ? clock_time(t / done_ * (total_ - done_)) : "?";
  char text[256];
  std::snprintf(text, sizeof text, "%d/%d requests [%s<%s], prefill %.0f tok/s, decode %.0f tok/s", done_, total_,
                clock_time(t).c_str(), eta.c_str(), rate(prefill_tokens_, prefill_seconds_),
                rate(decode_tokens_, decode_seconds_));
  return text;
}

void ProgressBar::draw() {
  const int width = 30;
  const int filled = total_ > 0 ? done_ * width / total_ : width;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  std::fprintf(out_, "\rGenerating [%s] %s ", bar.c_str(), status().c_str());
  std::fflush(out_);
  line_open_ = true;
}

void ProgressBar::finish(const RunCounters& counters) {
  if (style_ == Style::Off || finished_) return;
  finished_ = true;
  if (line_open_) std::fputc('\n', out_);
  line_open_ = false;
  const double t = elapsed();
  char hit_rate[32] = "n/a";  // prefix caching off, or nothing was looked up
  if (counters.prefix_cache_queried_tokens > 0)
    std::snprintf(hit_rate, sizeof hit_rate, "%.1f%%",
                  100.0 * counters.prefix_cache_hit_tokens / counters.prefix_cache_queried_tokens);
  std::fprintf(out_,
               "nanovllm: %d requests in %.2f s: %lld prompt tokens computed, %lld output tokens (%.1f tok/s), "
               "prefix-cache hit rate %s, %lld preemptions\n",
               done_, t, static_cast<long long>(prefill_tokens_), static_cast<long long>(output_tokens_),
               rate(static_cast<double>(output_tokens_), t), hit_rate, static_cast<long long>(counters.preemptions));
  std::fflush(out_);
}

}  // namespace nanovllm
