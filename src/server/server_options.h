#pragma once
// What `nanovllm serve` is told beyond the engine's settings: where to listen, who may call, what the model is
// called, the limits that keep one client from hurting the others, and the request defaults.
#include <cstddef>
#include <string>

#include "common/error.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";            // loopback unless asked otherwise
  int port = 8000;                           // 0: any free port (tests)
  std::string api_key;                       // when set, /v1/* needs "Authorization: Bearer <key>"
  std::string served_model_name;             // the only name "model" may carry
  std::string model_path;                    // the folder, for /v1/models' "root"
  size_t max_body_bytes = size_t{16} << 20;  // larger request bodies get 413
  // Requests beyond max_num_seqs running plus this many waiting get 503 (queue bound).
  int max_waiting_requests = 8192;
  int io_threads = 2;  // threads running the connections (asynchronous: any number of connections each)

  std::string reasoning_parser;          // "" or "qwen3": <think>...</think> into reasoning_content
  std::string tool_call_parser;          // "" or "hermes": <tool_call>{json}</tool_call> into tool_calls
  bool enable_auto_tool_choice = false;  // parse tool calls for requests with tools and tool_choice "auto"

  // Throws InvalidInput for an unknown parser or auto tool choice without a parser (the CLI's one-line error).
  void validate() const;

  SamplingParams defaults;  // fields a request leaves out
  // Whether max_tokens' default was set (flag or generation_config.json). If not, completions default to vLLM's
  // 16 and chat to whatever fits in max_model_len, as vLLM does.
  bool default_max_tokens_set = false;
};

inline void ServerOptions::validate() const {
  if (!reasoning_parser.empty() && reasoning_parser != "qwen3")
    throw InvalidInput("--reasoning-parser must be qwen3, got '" + reasoning_parser + "'");
  if (!tool_call_parser.empty() && tool_call_parser != "hermes")
    throw InvalidInput("--tool-call-parser must be hermes, got '" + tool_call_parser + "'");
  if (enable_auto_tool_choice && tool_call_parser.empty())
    throw InvalidInput("--enable-auto-tool-choice needs --tool-call-parser hermes");
  if (max_waiting_requests < 0) throw InvalidInput("--max-waiting-requests must be >= 0");
  if (port < 0 || port > 65535) throw InvalidInput("--port must be in [0, 65535], got " + std::to_string(port));
}

}  // namespace nanovllm::server
