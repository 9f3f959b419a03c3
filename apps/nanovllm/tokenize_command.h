#pragma once
// `nanovllm tokenize`: the tokenizer and chat template from the command line, JSON in and out.
namespace CLI {
class App;
}

namespace nanovllm::cli {

// Registers the `tokenize` subcommand with its callback on `app`.
void add_tokenize_command(CLI::App& app);

}  // namespace nanovllm::cli
