// The server's parts without a client library: request checks, metrics, the queue bound, the API against a
// failing engine, and a client that leaves mid-stream (its KV blocks come back) on an in-process server.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/llm_engine.h"
#include "engine/tiny_model.h"
#include "scripted_engine.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/in_flight_limit.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/openai_request.h"

namespace nanovllm::server {
namespace {

using Json = nlohmann::ordered_json;

// The ApiError a parse throws, or a failure.
template <class Parse>
ApiError error_of(Parse parse) {
  try {
    parse();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return ApiError(0, "");
}

TEST(OpenAiRequest, UnknownAndUnsupportedFieldsAreNamed) {
  const SamplingParams defaults;
  const Json base = {{"model", "m"}, {"prompt", "hi"}};
  for (const auto& [field, value, message] : std::vector<std::tuple<std::string, Json, std::string>>{
           {"frobnicate", 1, "unknown field 'frobnicate'"},
           {"n", 2, "only n = 1"},
           {"best_of", 2, "best_of"},
           {"frequency_penalty", 0.5, "no penalties"},
           {"logit_bias", Json{{"5", 1}}, "no logit bias"},
           {"temperature", "hot", "must be a number"},
           {"logprobs", 50, "logprobs"},
           {"stream_options", Json{{"include_usage", true}}, "needs \"stream\": true"}}) {
    Json body = base;
    body[field] = value;
    const ApiError e = error_of([&] { parse_completion_request(body, defaults); });
    EXPECT_EQ(e.status(), 400) << field;
    EXPECT_EQ(e.param(), field);
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
  // Neutral values of what the engine lacks are fine, as are the fields it has.
  Json ok = base;
  ok.update(Json{{"n", 1},
                 {"presence_penalty", 0},
                 {"logit_bias", Json::object()},
                 {"seed", -1},
                 {"echo", true},
                 {"logprobs", 2},
                 {"stop", "x"},
                 {"user", "u"},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}});
  const CompletionRequest r = parse_completion_request(ok, defaults);
  EXPECT_EQ(r.params.seed, ~uint64_t{0});  // negative seeds wrap, as in vLLM
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_EQ(r.params.prompt_logprobs, 2);  // echo shows the prompt's logprobs too
  EXPECT_TRUE(r.stream && r.include_usage && r.echo);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(r.max_tokens.has_value());
}

TEST(OpenAiRequest, PromptForms) {
  const SamplingParams defaults;
  const auto prompts = [&](const Json& p) {
    return parse_completion_request({{"model", "m"}, {"prompt", p}}, defaults).prompts;
  };
  EXPECT_EQ(prompts("a").at(0).text, "a");
  EXPECT_EQ(prompts(Json::array({1, 2})).at(0).token_ids, (std::vector<int32_t>{1, 2}));
  const auto both = prompts(Json::array({"a", Json::array({3})}));
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].token_ids, std::vector<int32_t>{3});
  for (const Json& bad : {Json(5), Json::array(), Json::array({Json::object()}), Json(""), Json::array({-1})})
    EXPECT_EQ(error_of([&] { prompts(bad); }).param(), "prompt") << bad.dump();
}

TEST(OpenAiRequest, ChatFields) {
  SamplingParams defaults;
  defaults.temperature = 0.6f;  // from generation_config.json
  const Json messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  ChatRequest r = parse_chat_request({{"model", "m"},
                                      {"messages", messages},
                                      {"max_completion_tokens", 7},
                                      {"logprobs", true},
                                      {"top_logprobs", 3},
                                      {"chat_template_kwargs", {{"enable_thinking", false}}}},
                                     defaults);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.6f);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
  EXPECT_FALSE(r.auto_tool_choice);
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])");
  r = parse_chat_request({{"model", "m"}, {"messages", messages}, {"tools", tools}}, defaults);
  EXPECT_TRUE(r.auto_tool_choice);  // "auto" is the default once tools are given, as in vLLM
  r = parse_chat_request({{"model", "m"}, {"messages", messages}, {"tools", tools}, {"tool_choice", "none"}}, defaults);
  EXPECT_FALSE(r.auto_tool_choice);
  EXPECT_EQ(error_of([&] {
              parse_chat_request({{"model", "m"}, {"messages", messages}, {"tool_choice", "required"}}, defaults);
            }).param(),
            "tool_choice");
  EXPECT_EQ(error_of([&] {
              parse_chat_request({{"model", "m"}, {"messages", Json::array()}}, defaults);
            }).param(),
            "messages");
  EXPECT_EQ(error_of([&] {
              parse_chat_request({{"model", "m"}, {"messages", messages}, {"top_logprobs", 2}}, defaults);
            }).param(),
            "top_logprobs");
}

TEST(ApiError, OpenAiShape) {
  const Json e = ApiError(404, "no such model", "model").to_json();
  EXPECT_EQ(e.dump(), R"({"error":{"code":404,"message":"no such model","param":"model","type":"not_found_error"}})");
  EXPECT_TRUE(ApiError(400, "x").to_json()["error"]["param"].is_null());
  EXPECT_EQ(ApiError(401, "x").type(), "authentication_error");
}

TEST(Histogram, BucketsAreCumulativeAndInclusive) {
  Histogram h({0.1, 1.0});
  for (const double v : {0.05, 0.1, 0.5, 3.0}) h.observe(v);
  std::string out;
  h.render("x", "a=\"b\"", out);
  EXPECT_EQ(out,
            "x_bucket{a=\"b\",le=\"0.1\"} 2\n"
            "x_bucket{a=\"b\",le=\"1\"} 3\n"
            "x_bucket{a=\"b\",le=\"+Inf\"} 4\n"
            "x_sum{a=\"b\"} 3.65\n"
            "x_count{a=\"b\"} 4\n");
}

TEST(ServerMetrics, CountsTokensLatenciesAndEnds) {
  ServerMetrics m("my \"model\"");
  const EngineClock::time_point t0 = EngineClock::now();
  const auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<EngineClock::duration>(std::chrono::duration<double>(s));
  };
  std::optional<EngineClock::time_point> last;
  RequestDelta d;
  d.metrics.arrival_time = t0;
  d.metrics.first_scheduled_time = at(0.5);
  d.prompt_token_ids = {1, 2, 3};
  d.token_ids = {7};
  d.time = at(1.5);
  m.record(d, last);
  d.prompt_token_ids.clear();
  d.token_ids = {8, 9};
  d.time = at(1.52);
  d.finished = true;
  d.finish_reason = "length";
  m.record(d, last);
  m.record_abandoned();
  EngineStats stats;
  stats.num_running = 2;
  stats.num_kv_blocks = 10;
  stats.num_free_kv_blocks = 4;
  stats.prefix_cache_hit_tokens = 32;
  const std::string text = m.render(stats);
  const std::string labels = "model_name=\"my \\\"model\\\"\"";
  for (const std::string& line :
       {"nanovllm:num_requests_running{" + labels + "} 2\n", "nanovllm:kv_cache_usage_perc{" + labels + "} 0.6\n",
        "nanovllm:prefix_cache_hits_total{" + labels + "} 32\n", "nanovllm:prompt_tokens_total{" + labels + "} 3\n",
        "nanovllm:generation_tokens_total{" + labels + "} 3\n",
        "nanovllm:request_success_total{" + labels + ",finished_reason=\"length\"} 1\n",
        "nanovllm:request_success_total{" + labels + ",finished_reason=\"abort\"} 1\n",
        "nanovllm:time_to_first_token_seconds_bucket{" + labels + ",le=\"1\"} 0\n",
        "nanovllm:time_to_first_token_seconds_bucket{" + labels + ",le=\"2.5\"} 1\n",
        "nanovllm:inter_token_latency_seconds_bucket{" + labels + ",le=\"0.01\"} 0\n",
        "nanovllm:inter_token_latency_seconds_bucket{" + labels + ",le=\"0.025\"} 1\n",
        "nanovllm:e2e_request_latency_seconds_count{" + labels + "} 1\n",
        "nanovllm:request_queue_time_seconds_bucket{" + labels + ",le=\"0.5\"} 1\n",
        std::string("# TYPE nanovllm:time_to_first_token_seconds histogram\n")})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
}

TEST(InFlightLimit, SlotsGiveTheirPlacesBack) {
  InFlightLimit limit(3);
  std::optional<InFlightLimit::Slot> a = limit.try_acquire(2);
  ASSERT_TRUE(a);
  EXPECT_FALSE(limit.try_acquire(2));
  {
    std::optional<InFlightLimit::Slot> b = limit.try_acquire(1);
    ASSERT_TRUE(b);
    EXPECT_EQ(limit.in_flight(), 3);
    InFlightLimit::Slot moved = std::move(*b);
    b.reset();
    EXPECT_EQ(limit.in_flight(), 3);
  }
  EXPECT_EQ(limit.in_flight(), 2);
  a.reset();
  EXPECT_EQ(limit.in_flight(), 0);
}

// The tiny model with the Qwen3 tokenizer beside it (prompts as token ids: its vocabulary is 512).
EngineConfig tiny_with_tokenizer(const std::string& name) {
  EngineConfig c = test::tiny_config();
  const std::filesystem::path dir = test::tiny_model_with_tokenizer(name);
  c.model = dir.string();
  c.max_num_seqs = 8;
  c.num_kvcache_blocks = 40;
  return c;
}

ServerOptions options() {
  ServerOptions o;
  o.served_model_name = "tiny";
  o.port = 0;
  return o;
}

class EngineThatFails : public LLMEngine {
 public:
  using LLMEngine::LLMEngine;
  std::vector<RequestDelta> step_deltas() override { throw EngineError("device lost"); }
};

TEST(OpenAiApi, AFailedEngineIsUnhealthy) {
  const EngineConfig c = tiny_with_tokenizer("nanovllm_server_failing");
  if (c.model == "") GTEST_SKIP() << "no Qwen3 tokenizer files (scripts/fetch_tokenizer.sh)";
  AsyncEngine engine(std::make_unique<EngineThatFails>(c));
  OpenAiApi api(engine, options());
  const auto get = [&](const std::string& path) { return std::get<HttpReply>(api.handle({"GET", path, "", ""}, {})); };
  EXPECT_EQ(get("/health").status, 200);
  // The first request meets the failure: its stream ends with the error, and the server says 503.
  ApiResult first = api.handle({"POST", "/v1/completions", "", R"({"model": "tiny", "prompt": [1, 2, 3]})"}, {});
  ASSERT_TRUE(std::holds_alternative<std::unique_ptr<Generation>>(first));
  Generation& generation = *std::get<std::unique_ptr<Generation>>(first);
  std::optional<HttpReply> reply;
  for (int i = 0; i < 500 && !reply; ++i) {
    reply = generation.poll().reply;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 503);
  EXPECT_NE(reply->body.find("device lost"), std::string::npos) << reply->body;
  const HttpReply health = get("/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_NE(health.body.find("device lost"), std::string::npos);
  ApiResult next = api.handle({"POST", "/v1/completions", "", R"({"model": "tiny", "prompt": [1]})"}, {});
  EXPECT_EQ(std::get<HttpReply>(next).status, 503);
}

// The demo model (Qwen3's vocabulary, random weights) with the Qwen3 tokenizer: chat prompts tokenize within its
// vocabulary. Empty when the tokenizer files are missing.
EngineConfig demo_with_tokenizer(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path tiny = test::tiny_model_with_tokenizer(name);
  if (tiny.empty()) return {};
  fs::copy_file(NANOVLLM_CONFIGS_DIR "/demo_qwen3.json", tiny / "config.json", fs::copy_options::overwrite_existing);
  EngineConfig c = test::tiny_config();
  c.model = tiny.string();
  c.max_model_len = 512;
  c.num_kvcache_blocks = 64;
  return c;
}

// The reply (non-streamed) or the event stream's bytes, once the generation ends.
std::string run_to_end(ApiResult result) {
  if (auto* reply = std::get_if<HttpReply>(&result)) return reply->body;
  Generation& generation = *std::get<std::unique_ptr<Generation>>(result);
  std::string events;
  for (int i = 0; i < 2000; ++i) {
    Generation::Progress p = generation.poll();
    events += p.events;
    if (p.reply) return p.reply->body;
    if (p.end) return events;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "no end";
  return events;
}

// The chunks of an event stream, [DONE] checked and dropped.
std::vector<nlohmann::json> chunks_of(const std::string& events) {
  std::vector<nlohmann::json> chunks;
  size_t at = 0;
  while (at < events.size()) {
    const size_t end = events.find("\n\n", at);
    const std::string line = events.substr(at, end - at);
    EXPECT_TRUE(line.starts_with("data: ")) << line;
    at = end + 2;
    if (line == "data: [DONE]") {
      EXPECT_EQ(at, events.size());
      return chunks;
    }
    chunks.push_back(nlohmann::json::parse(line.substr(6)));
  }
  ADD_FAILURE() << "no [DONE]";
  return chunks;
}

TEST(OpenAiApi, ReasoningAndToolCallsParsedWholeAndStreamed) {
  EngineConfig c = demo_with_tokenizer("nanovllm_server_parsers");
  if (c.model.empty()) GTEST_SKIP() << "no Qwen3 tokenizer files (scripts/fetch_tokenizer.sh)";
  const std::string script =
      "<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{bad json}\n</tool_call>";
  const std::vector<std::string> pieces = test::ScriptedEngine::pieces_of(script, 3);
  AsyncEngine engine(std::make_unique<test::ScriptedEngine>(c, pieces));
  ServerOptions o = options();
  o.reasoning_parser = "qwen3";
  o.tool_call_parser = "hermes";
  o.enable_auto_tool_choice = true;
  OpenAiApi api(engine, o);
  nlohmann::json request = nlohmann::json::parse(R"({"model": "tiny", "ignore_eos": true, "temperature": 0,
      "messages": [{"role": "user", "content": "Weather in Paris?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})");
  request["max_tokens"] = pieces.size();
  const auto post = [&](const nlohmann::json& body) {
    return run_to_end(api.handle({"POST", "/v1/chat/completions", "", body.dump()}, {}));
  };

  const nlohmann::json whole = nlohmann::json::parse(post(request));
  const nlohmann::json& message = whole["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "The user wants the weather.") << whole;
  EXPECT_EQ(message["content"], "Let me check.\n<tool_call>\n{bad json}\n</tool_call>") << whole;
  ASSERT_EQ(message["tool_calls"].size(), 1u) << whole;
  const nlohmann::json& call = message["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_")) << call;
  EXPECT_EQ(call["id"].get<std::string>().size(), 29u);
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");

  request["stream"] = true;
  std::string reasoning, content;
  nlohmann::json calls = nlohmann::json::array();
  const std::vector<nlohmann::json> chunks = chunks_of(post(request));
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  for (const nlohmann::json& chunk : chunks) {
    const nlohmann::json& delta = chunk["choices"][0]["delta"];
    reasoning += delta.value("reasoning_content", "");
    content += delta.value("content", "");
    for (const nlohmann::json& call : delta.value("tool_calls", nlohmann::json::array())) calls.push_back(call);
  }
  EXPECT_EQ(reasoning, message["reasoning_content"]);
  EXPECT_EQ(content, message["content"]);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"], call["function"]);
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");

  // tool_choice "none": the calls stay text (the reasoning is still split off: that parser is the server's).
  request["stream"] = false;
  request["tool_choice"] = "none";
  const nlohmann::json plain = nlohmann::json::parse(post(request));
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls")) << plain;
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "length");
  EXPECT_NE(plain["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"), std::string::npos);
}

// A blocking loopback client, enough to leave in the middle of a stream.
class Client {
 public:
  explicit Client(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  }
  ~Client() { close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  void send(const std::string& data) { EXPECT_EQ(::send(fd_, data.data(), data.size(), 0), ssize_t(data.size())); }
  // Everything until the server closes the connection.
  std::string receive_all() {
    std::string all;
    for (std::string piece = receive(); !piece.empty(); piece = receive()) all += piece;
    return all;
  }
  std::string receive() {
    std::string buffer(65536, '\0');
    const ssize_t n = ::recv(fd_, buffer.data(), buffer.size(), 0);
    return buffer.substr(0, n > 0 ? static_cast<size_t>(n) : 0);
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// Steps take a while, so that a request of 200 tokens runs for seconds; counts its steps.
class SlowEngine : public LLMEngine {
 public:
  using LLMEngine::LLMEngine;
  std::vector<RequestDelta> step_deltas() override {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ++steps;
    return LLMEngine::step_deltas();
  }
  std::atomic<int> steps{0};
};

TEST(HttpServer, AClientThatLeavesMidStreamFreesItsKvBlocksWithinAStep) {
  const EngineConfig c = tiny_with_tokenizer("nanovllm_server_disconnect");
  if (c.model == "") GTEST_SKIP() << "no Qwen3 tokenizer files (scripts/fetch_tokenizer.sh)";
  auto slow = std::make_unique<SlowEngine>(c);
  SlowEngine& steps = *slow;
  AsyncEngine engine(std::move(slow));
  OpenAiApi api(engine, options());
  HttpServer server(api, "127.0.0.1", 0, 1, 1 << 20);
  std::thread serving([&] { server.run(false); });
  const int free_at_start = engine.stats().num_free_kv_blocks;
  for (const bool stream : {true, false}) {
    Client client(server.port());
    const std::string body =
        R"({"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 200, "ignore_eos": true, "stream": )" +
        std::string(stream ? "true" : "false") + "}";
    client.send("POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    if (stream) {
      EXPECT_TRUE(client.receive().starts_with("HTTP/1.1 200 OK"));
    }
    const auto running = [&] { return engine.stats().num_running; };
    for (int i = 0; i < 500 && running() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_EQ(running(), 1);
    EXPECT_LT(engine.stats().num_free_kv_blocks, free_at_start);
    const int steps_at_close = steps.steps;
    client.close();
    // The abort lands with the next step (the one running at the close may still finish first), long before the
    // 200 tokens could have been made.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (engine.stats().num_free_kv_blocks != free_at_start && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(engine.stats().num_free_kv_blocks, free_at_start) << (stream ? "streamed" : "non-streamed");
    EXPECT_EQ(engine.stats().num_running, 0);
    EXPECT_LE(steps.steps - steps_at_close, 2) << (stream ? "streamed" : "non-streamed");
  }
  server.stop();
  serving.join();
}

// Many connections on two I/O threads at once: streams that run to their end, clients that leave, and a stop
// with streams in flight (each still gets its last chunk and [DONE]). Run under ThreadSanitizer too.
TEST(HttpServer, ManyStreamsLeavingClientsAndAStopWithStreamsInFlight) {
  EngineConfig c = tiny_with_tokenizer("nanovllm_server_many");
  if (c.model.empty()) GTEST_SKIP() << "no Qwen3 tokenizer files (scripts/fetch_tokenizer.sh)";
  c.max_num_seqs = 16;
  c.num_kvcache_blocks = 160;
  AsyncEngine engine(std::make_unique<SlowEngine>(c));
  OpenAiApi api(engine, options());
  HttpServer server(api, "127.0.0.1", 0, 2, 1 << 20);
  std::thread serving([&] { server.run(false); });
  const int free_at_start = engine.stats().num_free_kv_blocks;
  const auto request = [](int max_tokens) {
    const std::string body = R"({"model": "tiny", "prompt": [5, 6, 7], "ignore_eos": true, "stream": true, )"
                             R"("max_tokens": )" +
                             std::to_string(max_tokens) + "}";
    return "POST /v1/completions HTTP/1.1\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
  };
  const std::string stream_end = "data: [DONE]\n\n\r\n0\r\n\r\n";

  std::vector<std::thread> clients;
  std::atomic<int> finished{0};
  for (int i = 0; i < 16; ++i) {
    clients.emplace_back([&, i] {
      Client client(server.port());
      if (i % 4 == 3) {  // leaves after the first bytes
        client.send(request(200));
        EXPECT_FALSE(client.receive().empty());
        return;
      }
      client.send(request(5));
      const std::string all = client.receive_all();
      EXPECT_TRUE(all.ends_with(stream_end)) << all;
      EXPECT_NE(all.find(R"("finish_reason":"length")"), std::string::npos) << all;
      ++finished;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(finished, 12);

  std::vector<std::unique_ptr<Client>> in_flight;
  for (int i = 0; i < 4; ++i) {
    in_flight.push_back(std::make_unique<Client>(server.port()));
    in_flight.back()->send(request(240));
    EXPECT_TRUE(in_flight.back()->receive().starts_with("HTTP/1.1 200 OK"));
  }
  server.stop();
  for (const auto& client : in_flight) {
    const std::string rest = client->receive_all();
    EXPECT_TRUE(rest.ends_with(stream_end)) << rest;
    EXPECT_NE(rest.find(R"("finish_reason":"abort")"), std::string::npos) << rest;
  }
  serving.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (engine.stats().num_free_kv_blocks != free_at_start && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(engine.stats().num_free_kv_blocks, free_at_start);
}

}  // namespace
}  // namespace nanovllm::server
