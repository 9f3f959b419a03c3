#pragma once
// The HTTP API without the HTTP: routes a request (method, path, Authorization, body) to OpenAI's and vLLM's
// endpoints and answers it, either at once (a reply) or with a Generation that the connection drives as the
// engine makes tokens. Thread-safe: every connection thread calls handle() at once.
#include <initializer_list>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "nanovllm/async_engine.h"
#include "server/generation.h"
#include "server/http_reply.h"
#include "server/in_flight_limit.h"
#include "server/metrics.h"
#include "server/server_options.h"

namespace nanovllm::server {

struct ApiRequest {
  std::string method;         // "GET", "POST", ...
  std::string target;         // path and query
  std::string authorization;  // the header's value, or empty
  std::string body;
};

using ApiResult = std::variant<HttpReply, std::unique_ptr<Generation>>;

class OpenAiApi {
 public:
  // Needs an engine with a tokenizer (throws InvalidInput otherwise).
  OpenAiApi(AsyncEngine& engine, ServerOptions options);

  // `on_ready` is passed to the engine for a generation's requests (see AsyncEngine::submit). Never throws for
  // what a client sends: errors come back as replies.
  ApiResult handle(const ApiRequest& request, const AsyncEngine::Wakeup& on_ready);

  const ServerOptions& options() const { return options_; }

 private:
  ApiResult route(const ApiRequest& request, const AsyncEngine::Wakeup& on_ready);
  HttpReply models() const;
  HttpReply health() const;
  nlohmann::ordered_json parse_tokenizer_body(const std::string& body,
                                              std::initializer_list<std::string_view> allowed) const;
  HttpReply tokenize(const std::string& body) const;
  HttpReply detokenize(const std::string& body) const;
  std::unique_ptr<Generation> completions(const std::string& body, const AsyncEngine::Wakeup& on_ready);
  std::unique_ptr<Generation> chat_completions(const std::string& body, const AsyncEngine::Wakeup& on_ready);

  // The shared steps of both endpoints: the model name, prompt length and max_tokens checks, the queue bound.
  void check_model(const std::string& model) const;
  // The request's max_tokens for a prompt of `prompt_tokens`; `chat` picks chat's default.
  int max_tokens_for(const std::optional<int>& requested, size_t prompt_tokens, bool chat) const;
  GenerationContext context(const char* id_prefix, int num_requests);
  std::vector<int32_t> encode(const std::string& text, const char* field) const;
  std::string random_id(const char* prefix);

  AsyncEngine& engine_;
  const Tokenizer& tokenizer_;
  const ServerOptions options_;
  const int max_model_len_;
  ServerMetrics metrics_;
  InFlightLimit in_flight_;
  std::mutex random_mutex_;
  std::mt19937_64 random_;
};

}  // namespace nanovllm::server
