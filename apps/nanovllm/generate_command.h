#pragma once
#include <CLI/CLI.hpp>

namespace nanovllm::cli {
// `nanovllm generate`: requests from --input (JSONL) and/or positional prompts, one output line each.
void add_generate_command(CLI::App& app);
}  // namespace nanovllm::cli
