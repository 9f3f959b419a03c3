#include "interrupt_watch.h"

#include "common/error.h"

namespace nanovllm::cli {

namespace {
// A signal handler can only reach static storage; this flag is the one piece of global state, written by
// the handler and read by the InterruptWatch that installed it.
volatile std::sig_atomic_t g_signal = 0;

extern "C" void record_signal(int sig) {
  if (g_signal != 0) {  // a second Ctrl-C: the user does not want to wait for the step to end
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  g_signal = sig;
}
}  // namespace

InterruptWatch::InterruptWatch() {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGINT, &action, &previous_int_) != 0 || sigaction(SIGTERM, &action, &previous_term_) != 0)
    throw EngineError("cannot install the SIGINT / SIGTERM handlers");
}

InterruptWatch::~InterruptWatch() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

int InterruptWatch::signal() const { return g_signal; }

}  // namespace nanovllm::cli
