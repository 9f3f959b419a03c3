#include "generate_command.h"

#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "common/error.h"
#include "common/json_parse.h"
#include "engine/llm_engine.h"
#include "engine/progress_bar.h"
#include "engine_options.h"
#include "interrupt_watch.h"
#include "ordered_line_writer.h"
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
    const std::string where = "line " + std::to_string(number);
    try {
      out.emplace_back(parse_request(parse_json<nlohmann::ordered_json>(line, where), defaults), "");
    } catch (const InvalidInput& e) {
      const std::string message = e.what();
      out.emplace_back(std::nullopt, message.starts_with(where) ? message : where + ": " + message);
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

  // The engine itself, not LLM::generate: each request's line is written as soon as it finishes.
  LLMEngine engine(a.engine.resolve());
  std::cerr << "nanovllm: " << engine.backend_name() << ", " << engine.num_kvcache_blocks() << " KV blocks ("
            << engine.kv_cache_bytes() / double(1 << 30) << " GiB), startup " << engine.startup_seconds() << " s\n";

  OrderedLineWriter writer(out, requests.size());
  const auto write = [&](size_t i, const RequestOutput& o) {
    writer.set(i, output_to_json(o).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  };
  const auto write_error = [&](size_t i, const std::string& error) {
    RequestOutput o;
    o.error = error;
    write(i, o);
  };
  // From here on Ctrl-C (or `timeout`'s SIGTERM) ends the run after the current step, with every finished
  // line written in order and each unfinished one marked; the exit code is then 128 + the signal.
  const InterruptWatch interrupt;
  std::map<int64_t, size_t> line_of;  // engine request id -> output line
  for (size_t i = 0; i < requests.size(); ++i) {
    auto& [req, error] = requests[i];
    if (!req) {
      write_error(i, error);
      continue;
    }
    try {
      if (req->messages)
        req->prompt.text =
            engine.apply_chat_template(*req->messages, req->tools, req->add_generation_prompt, req->template_kwargs);
      line_of[engine.add_request(req->prompt, req->params)] = i;
    } catch (const InvalidInput& e) {  // one bad request never takes down the others
      RequestOutput o;
      o.error = e.what();
      o.prompt_token_ids = req->prompt.token_ids;
      write(i, o);
    }
  }
  ProgressBar bar(static_cast<int>(line_of.size()), engine.config().show_progress);
  while (!engine.is_finished() && interrupt.signal() == 0) {
    std::vector<RequestOutput> done = engine.step();
    bar.update(step_progress(engine.last_step(), done));
    for (const RequestOutput& o : done) write(line_of.at(o.request_id), o);
  }
  if (interrupt.signal() == 0) {
    bar.finish(engine.run_counters());
    return 0;
  }
  for (size_t i = 0; i < requests.size(); ++i)
    if (!writer.has(i))
      write_error(i, "interrupted by signal " + std::to_string(interrupt.signal()) + " before it finished");
  std::cerr << "nanovllm: interrupted; " << line_of.size() << " requests ran, unfinished ones are marked\n";
  return interrupt.exit_code();
}
}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "generate continuations of prompts");
  args->engine.add_to(*cmd);
  args->sampling.add_to(*cmd);
  cmd->add_option("--input", args->input, "requests, one JSON object a line");
  cmd->add_option("--output", args->output,
                  "where to write one JSON line per request, in input order, each as soon as it can be (default "
                  "stdout). On SIGINT / SIGTERM the run stops after the current step, unfinished requests get "
                  "an \"error\" line, and the exit code is 130 / 143");
  cmd->add_option("prompts", args->prompts, "prompt texts");
  cmd->callback([args] { throw CLI::RuntimeError(run_generate(*args)); });
}

}  // namespace nanovllm::cli
