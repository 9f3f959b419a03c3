// The `nanovllm` command: generate, tokenize, bench, bench-serve, serve. Errors end as one line on stderr and
// exit code 1.
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "bench_command.h"
#include "bench_serve/bench_serve_command.h"
#include "common/error.h"
#include "generate_command.h"
#include "serve_command.h"
#include "tokenize_command.h"

namespace {
// CLI11 reports `nanovllm typo` as "A subcommand is required"; name the word it did not know instead.
std::optional<CLI::ParseError> unknown_subcommand_error(CLI::App& app) {
  const std::vector<std::string> rest = app.remaining();
  if (!app.get_subcommands().empty() || rest.empty() || rest.front().starts_with('-')) return std::nullopt;
  std::string known;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    known += (known.empty() ? "" : ", ") + sub->get_name();
  return CLI::ParseError("unknown subcommand '" + rest.front() + "' (expected one of: " + known + ")",
                         CLI::ExitCodes::ExtrasError);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nanovllm: a small, fast LLM inference engine for Qwen3 models"};
  app.set_version_flag("--version", "nanovllm " NANOVLLM_VERSION);
  app.require_subcommand(1);
  nanovllm::cli::add_generate_command(app);
  nanovllm::cli::add_tokenize_command(app);
  nanovllm::cli::add_bench_command(app);
  nanovllm::cli::add_bench_serve_command(app);
  nanovllm::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a subcommand's exit code
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    if (auto unknown = unknown_subcommand_error(app)) return app.exit(*unknown);
    return app.exit(e);
  } catch (const nanovllm::InvalidInput& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
