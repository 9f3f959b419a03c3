#pragma once
#include <CLI/CLI.hpp>

namespace nanovllm::cli {
// `nanovllm bench`: nano-vLLM's bench.py workload (default), --latency, or --prefill.
void add_bench_command(CLI::App& app);
}  // namespace nanovllm::cli
