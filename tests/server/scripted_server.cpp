// `nanovllm serve` with a scripted engine (scripted_engine.h), for client tests of the output parsers: the demo
// model runs, but every answer is SCRIPT. Prints the same startup line as `nanovllm serve`; SIGTERM stops it.
//   scripted_server MODEL_DIR SCRIPT
#include <iostream>
#include <memory>

#include "nanovllm/async_engine.h"
#include "scripted_engine.h"
#include "server/http_server.h"
#include "server/openai_api.h"

int main(int argc, char** argv) {
  using namespace nanovllm;
  if (argc != 3) {
    std::cerr << "usage: scripted_server MODEL_DIR SCRIPT\n";
    return 2;
  }
  try {
    EngineConfig config;
    config.model = argv[1];
    config.device = "cpu";
    config.kvcache_block_size = 16;
    config.num_kvcache_blocks = 256;
    config.max_model_len = 1024;
    config.show_progress = false;
    AsyncEngine engine(std::make_unique<test::ScriptedEngine>(config, test::ScriptedEngine::pieces_of(argv[2], 3)));
    server::ServerOptions options;
    options.served_model_name = "demo";
    options.reasoning_parser = "qwen3";
    options.tool_call_parser = "hermes";
    options.enable_auto_tool_choice = true;
    server::OpenAiApi api(engine, options);
    server::HttpServer http(api, "127.0.0.1", 0, 1, options.max_body_bytes);
    std::cout << "nanovllm: serving 'demo' on http://127.0.0.1:" << http.port() << " (scripted)" << std::endl;
    http.run(true);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
