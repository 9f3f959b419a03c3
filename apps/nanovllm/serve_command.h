#pragma once
#include <CLI/CLI.hpp>

namespace nanovllm::cli {
// `nanovllm serve`: the OpenAI-compatible HTTP server (docs/server.md).
void add_serve_command(CLI::App& app);
}  // namespace nanovllm::cli
