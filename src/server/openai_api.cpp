#include "server/openai_api.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "common/json_parse.h"
#include "common/quoted.h"
#include "server/chat_generation.h"
#include "server/completion_generation.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm::server {

namespace {
using Json = nlohmann::ordered_json;

Json parse_body(const std::string& body) {
  try {
    return parse_json<Json>(body, "request body");
  } catch (const InvalidInput& e) {
    throw ApiError(400, e.what());
  }
}

const Tokenizer& tokenizer_of(const AsyncEngine& engine) {
  if (!engine.tokenizer())
    throw InvalidInput("the server needs the model's tokenizer files (tokenizer.json) beside config.json");
  return *engine.tokenizer();
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// OpenAI's message content may be a list of parts; the chat template wants text. Text parts are joined with
// newlines, as vLLM does; other kinds of parts (images, audio) this server cannot take.
Json flatten_content(Json messages) {
  for (Json& m : messages) {
    if (!m.contains("content") || !m["content"].is_array()) continue;
    std::string text;
    for (const Json& part : m["content"]) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
        throw invalid_field(
            "messages", "message content parts must be {\"type\": \"text\", \"text\": ...}, got " + quoted_json(part));
      if (!text.empty()) text += '\n';
      text += part["text"].get_ref<const std::string&>();
    }
    m["content"] = text;
  }
  return messages;
}

std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }
}  // namespace

OpenAiApi::OpenAiApi(AsyncEngine& engine, ServerOptions options)
    : engine_(engine),
      tokenizer_(tokenizer_of(engine)),
      options_(std::move(options)),
      max_model_len_(engine.config().max_model_len),
      metrics_(options_.served_model_name),
      in_flight_(engine.config().max_num_seqs + options_.max_waiting_requests),
      random_(std::random_device{}()) {
  options_.validate();
}

ApiResult OpenAiApi::handle(const ApiRequest& request, const AsyncEngine::Wakeup& on_ready) {
  try {
    return route(request, on_ready);
  } catch (const ApiError& e) {
    return error_reply(e);
  } catch (const InvalidInput& e) {
    return error_reply(ApiError(400, e.what()));
  } catch (const EngineError& e) {
    return error_reply(ApiError(503, e.what()));
  } catch (const std::exception& e) {
    return error_reply(ApiError(500, std::string("internal error: ") + e.what()));
  }
}

ApiResult OpenAiApi::route(const ApiRequest& request, const AsyncEngine::Wakeup& on_ready) {
  const std::string path = path_of(request.target);
  if (!options_.api_key.empty() && path.starts_with("/v1/") && request.authorization != "Bearer " + options_.api_key)
    throw ApiError(401, request.authorization.empty() ? "missing API key: send \"Authorization: Bearer <key>\""
                                                      : "invalid API key");
  const auto allow = [&](const char* method) {
    if (request.method != method)
      throw ApiError(405,
                     "method " + quoted_text(request.method) + " is not allowed on " + path + " (use " + method + ")");
  };
  if (path == "/v1/completions") return allow("POST"), completions(request.body, on_ready);
  if (path == "/v1/chat/completions") return allow("POST"), chat_completions(request.body, on_ready);
  if (path == "/v1/models") return allow("GET"), models();
  if (path == "/health") return allow("GET"), health();
  if (path == "/version") return allow("GET"), json_reply({{"version", NANOVLLM_VERSION}});
  if (path == "/tokenize") return allow("POST"), tokenize(request.body);
  if (path == "/detokenize") return allow("POST"), detokenize(request.body);
  if (path == "/metrics") {
    allow("GET");
    return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render(engine_.stats())};
  }
  throw ApiError(404, "route " + quoted_text(path) + " not found");
}

HttpReply OpenAiApi::models() const {
  const nlohmann::json model = {{"id", options_.served_model_name}, {"object", "model"},
                                {"created", unix_seconds()},        {"owned_by", "nanovllm"},
                                {"root", options_.model_path},      {"parent", nullptr},
                                {"max_model_len", max_model_len_}};
  return json_reply({{"object", "list"}, {"data", nlohmann::json::array({model})}});
}

HttpReply OpenAiApi::health() const {
  if (!engine_.healthy()) throw ApiError(503, "the engine has failed: " + engine_.error());
  return {200, "application/json", ""};
}

std::vector<int32_t> OpenAiApi::encode(const std::string& text, const char* field) const {
  try {
    return tokenizer_.encode(text);
  } catch (const InvalidInput& e) {
    throw invalid_field(field, std::string("field '") + field + "': " + e.what());
  }
}

// A tokenizer route's body: a JSON object of `allowed` fields only, whose optional `model` (as in vLLM) names
// this server's model.
Json OpenAiApi::parse_tokenizer_body(const std::string& body, std::initializer_list<std::string_view> allowed) const {
  Json request = parse_body(body);
  if (!request.is_object()) throw ApiError(400, "the request body must be a JSON object");
  for (const auto& [key, value] : request.items())
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      throw invalid_field(key, "unknown field " + quoted_text(key));
  if (request.contains("model")) {
    if (!request["model"].is_string()) throw invalid_field("model", "field 'model' must be a string");
    check_model(request["model"].get<std::string>());
  }
  return request;
}

HttpReply OpenAiApi::tokenize(const std::string& body) const {
  const Json request =
      parse_tokenizer_body(body, {"model", "prompt", "messages", "add_generation_prompt", "chat_template_kwargs"});
  std::string text;
  if (request.contains("prompt") == request.contains("messages"))
    throw ApiError(400, "give exactly one of 'prompt' or 'messages'");
  if (request.contains("prompt")) {
    if (!request["prompt"].is_string()) throw invalid_field("prompt", "field 'prompt' must be a string");
    text = request["prompt"].get<std::string>();
  } else {
    Json chat = request;
    chat["model"] = options_.served_model_name;
    const ChatRequest parsed = parse_chat_request(chat, options_.defaults);
    text = engine_.apply_chat_template(flatten_content(parsed.messages), nullptr, parsed.add_generation_prompt,
                                       parsed.template_kwargs);
  }
  const std::vector<int32_t> ids = encode(text, "prompt");
  return json_reply({{"count", ids.size()}, {"max_model_len", max_model_len_}, {"tokens", ids}});
}

HttpReply OpenAiApi::detokenize(const std::string& body) const {
  const Json request = parse_tokenizer_body(body, {"model", "tokens"});
  if (!request.contains("tokens") || !request["tokens"].is_array())
    throw invalid_field("tokens", "field 'tokens' must be an array of token ids");
  std::vector<int32_t> ids;
  for (const Json& id : request["tokens"]) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tokenizer_.vocab_size())
      throw invalid_field("tokens", "token id " + quoted_json(id) + " is outside the vocabulary [0, " +
                                        std::to_string(tokenizer_.vocab_size()) + ")");
    ids.push_back(id.get<int32_t>());
  }
  return json_reply({{"prompt", tokenizer_.decode(ids, false)}});
}

void OpenAiApi::check_model(const std::string& model) const {
  if (model != options_.served_model_name)
    throw ApiError(404,
                   "the model " + quoted_text(model) + " does not exist (this server serves " +
                       quoted_text(options_.served_model_name) + ")",
                   "model");
}

int OpenAiApi::max_tokens_for(const std::optional<int>& requested, size_t prompt_tokens, bool chat) const {
  if (static_cast<int64_t>(prompt_tokens) >= max_model_len_)
    throw invalid_field("prompt", "this model's maximum context length is " + std::to_string(max_model_len_) +
                                      " tokens, but the prompt has " + std::to_string(prompt_tokens) +
                                      " tokens, which leaves no room for output");
  const int room = max_model_len_ - static_cast<int>(prompt_tokens);
  if (requested) {
    if (*requested > room)
      throw invalid_field("max_tokens", "this model's maximum context length is " + std::to_string(max_model_len_) +
                                            " tokens; the prompt has " + std::to_string(prompt_tokens) +
                                            " and max_tokens asks for " + std::to_string(*requested) + " more");
    return *requested;
  }
  // vLLM's defaults: completions 16, chat all the room left; a configured default wins but never overflows.
  if (options_.default_max_tokens_set) return std::min(options_.defaults.max_tokens, room);
  return chat ? room : std::min(16, room);
}

GenerationContext OpenAiApi::context(const char* id_prefix, int num_requests) {
  if (!engine_.healthy()) throw ApiError(503, "the engine has failed: " + engine_.error());
  std::optional<InFlightLimit::Slot> slot = in_flight_.try_acquire(num_requests);
  if (!slot)
    throw ApiError(503, "the server is at its queue bound (" + std::to_string(in_flight_.in_flight()) +
                            " requests in flight); retry later");
  return GenerationContext{
      engine_,         tokenizer_, metrics_, random_id(id_prefix), unix_seconds(), options_.served_model_name,
      std::move(*slot)};
}

std::string OpenAiApi::random_id(const char* prefix) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  std::lock_guard lock(random_mutex_);
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = random_();
    for (int i = 0; i < 16; ++i, bits >>= 4) id += kHex[bits & 0xF];
  }
  return id;
}

std::unique_ptr<Generation> OpenAiApi::completions(const std::string& body, const AsyncEngine::Wakeup& on_ready) {
  const CompletionRequest request = parse_completion_request(parse_body(body), options_.defaults);
  check_model(request.model);
  std::vector<Generation::Choice> choices;
  std::vector<SamplingParams> params;
  for (const Prompt& prompt : request.prompts) {
    Generation::Choice c;
    c.prompt_ids = prompt.token_ids.empty() ? encode(prompt.text, "prompt") : prompt.token_ids;
    if (c.prompt_ids.empty()) throw invalid_field("prompt", "the prompt is empty after tokenization");
    if (request.echo)
      c.prompt_text = prompt.token_ids.empty() ? prompt.text : tokenizer_.decode(prompt.token_ids, false);
    params.push_back(request.params);
    params.back().max_tokens = max_tokens_for(request.max_tokens, c.prompt_ids.size(), false);
    validate_sampling(params.back());
    choices.push_back(std::move(c));
  }
  auto generation =
      std::make_unique<CompletionGeneration>(context("cmpl-", static_cast<int>(choices.size())), request.stream,
                                             request.include_usage, request.echo, request.logprobs);
  for (size_t i = 0; i < choices.size(); ++i) {
    choices[i].stream = engine_.submit(Prompt::from_tokens(choices[i].prompt_ids), params[i], on_ready);
    generation->add_choice(std::move(choices[i]));
  }
  return generation;
}

std::unique_ptr<Generation> OpenAiApi::chat_completions(const std::string& body, const AsyncEngine::Wakeup& on_ready) {
  ChatRequest request = parse_chat_request(parse_body(body), options_.defaults);
  check_model(request.model);
  if (request.auto_tool_choice && !options_.enable_auto_tool_choice)
    throw invalid_field("tool_choice",
                        "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
  std::string prompt;
  try {
    prompt = engine_.apply_chat_template(flatten_content(request.messages), request.tools,
                                         request.add_generation_prompt, request.template_kwargs);
  } catch (const InvalidInput& e) {
    throw invalid_field("messages", e.what());
  }
  Generation::Choice c;
  c.prompt_ids = encode(prompt, "messages");
  request.params.max_tokens = max_tokens_for(request.max_tokens, c.prompt_ids.size(), true);
  validate_sampling(request.params);
  const std::optional<int> top_logprobs = request.logprobs ? std::optional<int>(request.top_logprobs) : std::nullopt;
  auto generation =
      std::make_unique<ChatGeneration>(context("chatcmpl-", 1), request.stream, request.include_usage, top_logprobs,
                                       ChatOutputParser(!options_.reasoning_parser.empty(), request.auto_tool_choice),
                                       [this] { return random_id("call_").substr(0, 29); });
  c.stream = engine_.submit(Prompt::from_tokens(c.prompt_ids), request.params, on_ready);
  generation->add_choice(std::move(c));
  return generation;
}

}  // namespace nanovllm::server
