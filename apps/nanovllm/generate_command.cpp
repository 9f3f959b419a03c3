#include "generate_command.h"

#include <fstream>
#include <iostream>
#include <memory>

#include "common/error.h"
#include "engine_options.h"
#include "request_json.h"

namespace nanovllm::cli {

namespace {
struct GenerateArgs {
  EngineOptions engine;
  SamplingOptions sampling;
  std::string input, output;
  std::vector<std::string> prompts;
};

// Reads the request file: every line becomes a request or an error slot; blank lines are skipped.
std::vector<std::pair<std::optional<ParsedRequest>, std::string>> read_requests(const std::string& path,
                                                                                const SamplingParams& defaults) {
  std::ifstream in(path);
  if (!in) throw InvalidInput("cannot open input file '" + path + "'");
  std::vector<std::pair<std::optional<ParsedRequest>, std::string>> out;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.emplace_back(parse_request(nlohmann::ordered_json::parse(line), defaults), "");
    } catch (const nlohmann::ordered_json::parse_error& e) {
      out.emplace_back(std::nullopt, "line " + std::to_string(number) + ": malformed JSON: " + e.what());
    } catch (const InvalidInput& e) {
      out.emplace_back(std::nullopt, e.what());
    }
  }
  return out;
}

int run_generate(const GenerateArgs& a) {
  const SamplingParams defaults = a.sampling.resolve(a.engine.config.model);
  defaults.validate();
  std::vector<std::pair<std::optional<ParsedRequest>, std::string>> requests;
  if (!a.input.empty()) requests = read_requests(a.input, defaults);
  for (const std::string& p : a.prompts) {
    ParsedRequest r;
    r.prompt.text = p;
    r.params = defaults;
    requests.emplace_back(std::move(r), "");
  }
  if (requests.empty()) throw InvalidInput("no requests: give --input FILE or prompts");

  std::ofstream file;
  if (!a.output.empty()) {
    file.open(a.output);
    if (!file) throw InvalidInput("cannot write output file '" + a.output + "'");
  }
  std::ostream& out = a.output.empty() ? std::cout : file;

  LLM llm(a.engine.resolve());
  const EngineSummary engine = llm.summary();
  std::cerr << "nanovllm: " << engine.backend << ", " << engine.num_kvcache_blocks << " KV blocks ("
            << engine.kv_cache_bytes / double(1 << 30) << " GiB), startup " << engine.startup_seconds << " s\n";

  // Lines that parsed (and whose messages rendered) go into one generate call; the rest keep their error.
  std::vector<RequestOutput> outputs(requests.size());
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  std::vector<size_t> slot;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto& [req, error] = requests[i];
    if (!req) {
      outputs[i].error = error;
      continue;
    }
    try {
      if (req->messages)
        req->prompt.text = llm.apply_chat_template(*req->messages, req->tools, req->add_generation_prompt,
                                                   req->template_kwargs);
    } catch (const InvalidInput& e) {
      outputs[i].error = e.what();
      continue;
    }
    prompts.push_back(req->prompt);
    params.push_back(req->params);
    slot.push_back(i);
  }
  std::vector<RequestOutput> generated = llm.generate(prompts, params);
  for (size_t k = 0; k < generated.size(); ++k) outputs[slot[k]] = std::move(generated[k]);
  for (const RequestOutput& o : outputs)
    out << output_to_json(o).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}
}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "generate continuations of prompts");
  args->engine.add_to(*cmd);
  args->sampling.add_to(*cmd);
  cmd->add_option("--input", args->input, "requests, one JSON object a line");
  cmd->add_option("--output", args->output, "where to write one JSON line per request (default stdout)");
  cmd->add_option("prompts", args->prompts, "prompt texts");
  cmd->callback([args] { throw CLI::RuntimeError(run_generate(*args)); });
}

}  // namespace nanovllm::cli
