#include "fake_openai_server.h"

#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace nanovllm::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace {
asio::awaitable<void> pause(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

asio::awaitable<void> write_text(tcp::socket& socket, const std::string& text) {
  co_await asio::async_write(socket, asio::buffer(text), asio::use_awaitable);
}

// One piece of a chunked body.
asio::awaitable<void> write_chunk(tcp::socket& socket, const std::string& bytes) {
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
  co_await write_text(socket, size + bytes + "\r\n");
}

std::string response(unsigned status, const std::string& type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + type +
         "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string text_event(int i) {
  return "data: " + nlohmann::json{{"choices", {{{"index", 0}, {"text", "t" + std::to_string(i)}}}}}.dump() + "\n\n";
}

// A request the benchmark must send as vLLM's does: streamed, with usage, ignoring EOS, for our model.
bool well_formed(const nlohmann::json& r) {
  return r.value("model", "") == FakeOpenAiServer::kModel && r.value("stream", false) && r.value("ignore_eos", false) &&
         r.contains("stream_options") && r["stream_options"].value("include_usage", false) && r.contains("prompt") &&
         r["prompt"].is_array() && !r["prompt"].empty() && r.contains("max_tokens");
}

asio::awaitable<void> stream_completion(tcp::socket& socket, const nlohmann::json& request) {
  const int behaviour = request["prompt"][0].get<int>();
  if (behaviour == FakeOpenAiServer::kHttp500) {
    co_await write_text(socket, response(500, "application/json", R"({"error": {"message": "boom"}})"));
    co_return;
  }
  co_await write_text(socket,
                      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
  co_await pause(behaviour == FakeOpenAiServer::kSilent ? std::chrono::milliseconds(5000)
                                                        : FakeOpenAiServer::kFirstDelay);
  for (int i = 0; i < FakeOpenAiServer::kChunks; ++i) {
    if (i > 0) co_await pause(FakeOpenAiServer::kGap);
    if (behaviour == FakeOpenAiServer::kNotJson && i == 2) co_await write_chunk(socket, "data: {oops\n\n");
    const std::string event = text_event(i);
    if (i == 1) {  // one event split across writes, with a comment before it
      co_await write_chunk(socket, ": keep-alive\n\n" + event.substr(0, 9));
      co_await write_chunk(socket, event.substr(9));
    } else {
      co_await write_chunk(socket, event);
    }
    if (behaviour == FakeOpenAiServer::kErrorEvent && i == 1) {
      co_await write_chunk(socket, "data: {\"error\": {\"message\": \"engine died\", \"code\": 500}}\n\n");
      break;  // vLLM then ends the stream with [DONE]
    }
    if (behaviour == FakeOpenAiServer::kCutShort) co_return;  // closes mid-body
  }
  const nlohmann::json usage = {{"choices", nlohmann::json::array()},
                                {"usage",
                                 {{"prompt_tokens", request["prompt"].size()},
                                  {"completion_tokens", FakeOpenAiServer::kChunks},
                                  {"total_tokens", request["prompt"].size() + FakeOpenAiServer::kChunks}}}};
  if (behaviour != FakeOpenAiServer::kNoUsage && behaviour != FakeOpenAiServer::kErrorEvent)
    co_await write_chunk(socket, "data: " + usage.dump() + "\n\n");
  co_await write_chunk(socket, "data: [DONE]\n\n");
  co_await write_text(socket, "0\r\n\r\n");
}

asio::awaitable<void> serve(tcp::socket socket) {
  try {
    beast::flat_buffer buffer;
    http::request<http::string_body> request;
    co_await http::async_read(socket, buffer, request, asio::use_awaitable);
    if (request.method() == http::verb::get && request.target() == "/v1/models") {
      co_await write_text(socket, response(200, "application/json",
                                           R"({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})"));
    } else if (request.method() == http::verb::post && request.target() == "/v1/completions") {
      const nlohmann::json body = nlohmann::json::parse(request.body());
      if (well_formed(body)) co_await stream_completion(socket, body);
      else co_await write_text(socket, response(400, "text/plain", "unexpected request " + request.body()));
    } else {
      co_await write_text(socket, response(404, "text/plain", "no such endpoint"));
    }
  } catch (const std::exception&) {  // the client went away: nothing to do
  }
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> accept_all(tcp::acceptor& acceptor) {
  while (true) {
    tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
    asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
  }
}
}  // namespace

FakeOpenAiServer::FakeOpenAiServer() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
  port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(io_, accept_all(acceptor_), asio::detached);
  thread_ = std::thread([this] { io_.run(); });
}

FakeOpenAiServer::~FakeOpenAiServer() {
  io_.stop();
  thread_.join();
}

}  // namespace nanovllm::cli
