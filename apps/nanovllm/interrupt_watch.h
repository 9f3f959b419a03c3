#pragma once
// SIGINT and SIGTERM (Ctrl-C, `timeout`) as a request to stop after the current step rather than an
// immediate death, so that finished work is written before the process exits.
#include <csignal>

namespace nanovllm::cli {

// Installs the handlers for its lifetime and restores the previous ones after. One at a time.
class InterruptWatch {
 public:
  InterruptWatch();
  ~InterruptWatch();
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

  // The signal that arrived (SIGINT or SIGTERM), or 0.
  int signal() const;
  // A shell's exit status for a death by that signal: 128 + signal (130 for SIGINT, 143 for SIGTERM).
  int exit_code() const { return 128 + signal(); }

 private:
  struct sigaction previous_int_ {
  }, previous_term_{};
};

}  // namespace nanovllm::cli
