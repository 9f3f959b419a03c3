#include "serve_command.h"

#include <iostream>
#include <memory>
#include <thread>

#include <sys/resource.h>

#include "common/error.h"
#include "engine_options.h"
#include "nanovllm/async_engine.h"
#include "server/http_server.h"
#include "server/openai_api.h"

namespace nanovllm::cli {

namespace {
struct ServeArgs {
  EngineOptions engine;
  SamplingOptions sampling;
  server::ServerOptions server;
};

// Every open stream is a socket: lift the soft file limit to the hard one, as vLLM does.
void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

int run_serve(ServeArgs& a) {
  if (a.sampling.logprobs || a.sampling.prompt_logprobs)
    throw InvalidInput("--logprobs and --prompt-logprobs are request fields for the server (\"logprobs\")");
  a.server.validate();  // before the model loads: a typo fails in a second
  EngineConfig config = a.engine.resolve();
  config.show_progress = false;
  server::ServerOptions options = a.server;
  options.defaults = a.sampling.resolve(config.model);
  options.defaults.validate();
  options.default_max_tokens_set =
      a.sampling.max_tokens.has_value() || options.defaults.max_tokens != SamplingParams{}.max_tokens;
  if (options.served_model_name.empty()) options.served_model_name = config.model;
  options.model_path = config.model;
  options.io_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1U, 4U));
  raise_open_file_limit();

  AsyncEngine engine(config);
  server::OpenAiApi api(engine, options);
  server::HttpServer http(api, options.host, options.port, options.io_threads, options.max_body_bytes);
  const EngineStats stats = engine.stats();
  std::cout << "nanovllm: serving '" << options.served_model_name << "' on http://" << options.host << ":"
            << http.port() << " (" << stats.num_kv_blocks << " KV blocks of " << engine.config().kvcache_block_size
            << " tokens, max_model_len " << engine.config().max_model_len << ")" << std::endl;
  http.run(/*handle_signals=*/true);
  std::cout << "nanovllm: stopped" << std::endl;
  return 0;
}
}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "serve the model over an OpenAI-compatible HTTP API");
  args->engine.add_to(*cmd);
  args->sampling.add_to(*cmd);
  server::ServerOptions& s = args->server;
  cmd->add_option("--host", s.host, "IP address to listen on")->capture_default_str();
  cmd->add_option("--port", s.port, "TCP port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", s.api_key, "require \"Authorization: Bearer KEY\" on /v1/*");
  cmd->add_option("--served-model-name", s.served_model_name, "the model name requests use (default: --model)");
  cmd->add_option("--max-request-body-bytes", s.max_body_bytes, "larger request bodies get 413")->capture_default_str();
  cmd->add_option("--max-waiting-requests", s.max_waiting_requests,
                  "requests beyond --max-num-seqs plus this many in flight get 503")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--reasoning-parser", s.reasoning_parser, "qwen3: <think>...</think> into reasoning_content");
  cmd->add_flag("--enable-auto-tool-choice", s.enable_auto_tool_choice,
                "parse tool calls for requests with tools (tool_choice \"auto\"); needs --tool-call-parser");
  cmd->add_option("--tool-call-parser", s.tool_call_parser, "hermes: <tool_call>{json}</tool_call> into tool_calls");
  cmd->callback([args] { throw CLI::RuntimeError(run_serve(*args)); });
}

}  // namespace nanovllm::cli
