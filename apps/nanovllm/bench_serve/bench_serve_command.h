#pragma once
#include <CLI/CLI.hpp>

namespace nanovllm::cli {
// `nanovllm bench-serve`: a load generator for OpenAI-compatible servers (ours or vLLM's), reporting
// throughput, TTFT, TPOT and ITL as vLLM's `vllm bench serve` does.
void add_bench_serve_command(CLI::App& app);
}  // namespace nanovllm::cli
