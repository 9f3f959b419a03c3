// The `nanovllm` command: generate, tokenize, bench. Errors end as one line on stderr and exit code 1.
#include <iostream>

#include <CLI/CLI.hpp>

#include "common/error.h"
#include "bench_command.h"
#include "generate_command.h"
#include "tokenize_command.h"

int main(int argc, char** argv) {
  CLI::App app{"nanovllm: a small, fast LLM inference engine for Qwen3 models"};
  app.require_subcommand(1);
  nanovllm::cli::add_generate_command(app);
  nanovllm::cli::add_tokenize_command(app);
  nanovllm::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a subcommand's exit code
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
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
