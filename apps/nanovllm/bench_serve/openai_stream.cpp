#include "bench_serve/openai_stream.h"

#include <array>
#include <cstdint>
#include <limits>
#include <optional>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "bench_serve/sse_parser.h"
#include "common/error.h"
#include "common/json_parse.h"
#include "common/quoted.h"

namespace nanovllm::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Clock = std::chrono::steady_clock;

namespace {
// A request that cannot complete; the text is its reason in the report.
class RequestFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr size_t kErrorBodyBytes = 4096;  // enough of an error response to find its message
constexpr size_t kModelListBytes = size_t{1} << 20;
constexpr size_t kReasonBytes = 80;  // failure reasons stay short so that they group and fit a line

std::string network_error(const char* step, const beast::error_code& ec) {
  if (ec == beast::error::timeout) return std::string(step) + ": no answer in time (--read-timeout)";
  return std::string(step) + ": " + ec.message();
}

asio::awaitable<void> connect(beast::tcp_stream& stream, const HttpServer& server) {
  beast::error_code ec;
  stream.expires_after(server.read_timeout);
  co_await stream.async_connect(server.endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) throw RequestFailed(network_error("connect", ec));
}

// Reads body bytes as they come into `chunk`; returns how many (0 at the end of the body).
asio::awaitable<size_t> read_body_some(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                       http::response_parser<http::buffer_body>& parser, std::array<char, 16384>& chunk,
                                       const HttpServer& server) {
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    beast::error_code ec;
    stream.expires_after(server.read_timeout);
    co_await http::async_read_some(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    // A connection closed mid-body ends the body; the caller says what was missing.
    if (ec == http::error::partial_message || ec == http::error::end_of_stream) co_return 0;
    if (ec && ec != http::error::need_buffer) throw RequestFailed(network_error("reading the response", ec));
    if (const size_t n = chunk.size() - parser.get().body().size; n > 0) co_return n;
  }
  co_return 0;
}

// The body up to about max_bytes (the start of an error message, or a small JSON answer).
asio::awaitable<std::string> read_body_start(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                             http::response_parser<http::buffer_body>& parser, const HttpServer& server,
                                             size_t max_bytes = kErrorBodyBytes) {
  std::array<char, 16384> chunk{};
  std::string body;
  while (body.size() < max_bytes) {
    const size_t n = co_await read_body_some(stream, buffer, parser, chunk, server);
    if (n == 0) break;
    body.append(chunk.data(), n);
  }
  co_return body;
}

// "HTTP 400: <the server's message>", the message from OpenAI's {"error": {"message": ...}}, FastAPI's
// {"detail": ...} or the text itself.
std::string http_failure(unsigned status, const std::string& body) {
  std::string message = body;
  try {
    const auto j = parse_json(body, "error body");
    const nlohmann::json* m = nullptr;
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message")) m = &j["error"]["message"];
    else if (j.contains("message")) m = &j["message"];
    else if (j.contains("detail")) m = &j["detail"];
    if (m != nullptr) message = m->is_string() ? m->get<std::string>() : m->dump();
  } catch (const InvalidInput&) {  // not JSON: the text is the message
  }
  std::string reason = "HTTP " + std::to_string(status);
  if (!message.empty()) reason += ": " + escaped_excerpt(message, kReasonBytes);
  return reason;
}

asio::awaitable<void> send(beast::tcp_stream& stream, http::request<http::string_body>& request,
                           const HttpServer& server) {
  request.set(http::field::host, server.host_header);
  request.set(http::field::user_agent, "nanovllm-bench-serve");
  request.prepare_payload();
  beast::error_code ec;
  stream.expires_after(server.read_timeout);
  co_await http::async_write(stream, request, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) throw RequestFailed(network_error("sending the request", ec));
}

asio::awaitable<void> read_header(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                  http::response_parser<http::buffer_body>& parser, const HttpServer& server) {
  beast::error_code ec;
  stream.expires_after(server.read_timeout);
  co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) throw RequestFailed(network_error("reading the response", ec));
}

// What one streamed event says: new text, the final usage, or the end.
struct StreamState {
  bool done = false;  // [DONE] arrived
  std::optional<int> output_tokens;
  bool any_text = false;
  Clock::time_point last_text;
};

void take_event(const SseEvent& event, Clock::time_point now, Clock::time_point sent, StreamState& s,
                RequestOutcome& outcome) {
  if (s.done) return;  // nothing may follow [DONE]; a benchmark ignores it
  if (event.data == "[DONE]") {
    s.done = true;
    return;
  }
  nlohmann::json chunk;
  try {
    chunk = parse_json(event.data, "event");
  } catch (const InvalidInput&) {
    throw RequestFailed("malformed stream: data is not JSON: " + quoted_text(event.data, kReasonBytes / 2));
  }
  if (!chunk.is_object()) throw RequestFailed("malformed stream: data is not a JSON object");
  if (const auto error = chunk.find("error"); error != chunk.end()) {
    const auto message = error->is_object() ? error->find("message") : error->end();
    throw RequestFailed("error event: " + escaped_excerpt(message != error->end() && message->is_string()
                                                              ? message->get<std::string>()
                                                              : error->dump(),
                                                          kReasonBytes));
  }
  if (const auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
    const auto tokens = usage->find("completion_tokens");
    if (tokens == usage->end() || !tokens->is_number_integer())
      throw RequestFailed("malformed stream: usage without an integer completion_tokens");
    s.output_tokens = tokens->get<int>();
  }
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;  // the usage chunk has none
  const nlohmann::json& choice = (*choices)[0];
  if (!choice.is_object()) throw RequestFailed("malformed stream: a choice is not an object");
  const auto text = choice.find("text");
  if (text == choice.end() || !text->is_string() || text->get_ref<const std::string&>().empty()) return;
  if (!s.any_text) outcome.ttft_s = std::chrono::duration<double>(now - sent).count();
  else outcome.itl_s.push_back(std::chrono::duration<double>(now - s.last_text).count());
  s.any_text = true;
  s.last_text = now;
}

asio::awaitable<void> run_stream(const HttpServer& server, const std::string& target, const std::string& body,
                                 RequestOutcome& outcome) {
  const Clock::time_point sent = Clock::now();
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  co_await connect(stream, server);
  http::request<http::string_body> request{http::verb::post, target, 11};
  request.set(http::field::content_type, "application/json");
  request.set(http::field::accept, "text/event-stream");
  request.body() = body;
  co_await send(stream, request, server);

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  // A stream is as long as the generation and nothing of it is kept: no limit. (Not boost::none, which
  // Beast 1.74 compares wrongly against a Content-Length.)
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  co_await read_header(stream, buffer, parser, server);
  if (const unsigned status = parser.get().result_int(); status != 200) {
    const std::string error_body = co_await read_body_start(stream, buffer, parser, server);
    throw RequestFailed(http_failure(status, error_body));
  }

  SseParser events;
  StreamState state;
  std::array<char, 16384> chunk{};
  while (!state.done) {
    const size_t n = co_await read_body_some(stream, buffer, parser, chunk, server);
    if (n == 0) break;
    const Clock::time_point now = Clock::now();
    try {
      for (const SseEvent& event : events.feed(std::string_view(chunk.data(), n)))
        take_event(event, now, sent, state, outcome);
    } catch (const SseError& e) {
      throw RequestFailed(std::string("malformed stream: ") + e.what());
    }
  }
  if (!state.done)
    throw RequestFailed(events.mid_event() ? "the stream ended inside an event"
                                           : "the stream ended before data: [DONE]");
  if (!state.output_tokens) throw RequestFailed("no usage in the stream (stream_options.include_usage ignored)");
  if (!state.any_text && *state.output_tokens > 0) throw RequestFailed("no text in the stream");
  outcome.output_tokens = *state.output_tokens;
  outcome.latency_s = std::chrono::duration<double>(Clock::now() - sent).count();
  beast::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
}
}  // namespace

asio::awaitable<RequestOutcome> stream_completion(const HttpServer& server, const std::string& target,
                                                  const std::string& body, int prompt_tokens) {
  RequestOutcome outcome;
  outcome.prompt_tokens = prompt_tokens;
  try {
    co_await run_stream(server, target, body, outcome);
    outcome.state = RequestOutcome::State::kCompleted;
  } catch (const std::exception& e) {  // RequestFailed, or anything else the network layer threw
    outcome.state = RequestOutcome::State::kFailed;
    outcome.error = e.what();
  }
  co_return outcome;
}

asio::awaitable<std::string> first_served_model(const HttpServer& server, const std::string& target) {
  const auto failed = [&](const std::string& why) {
    return InvalidInput("cannot learn the model name from GET " + target + " (pass --model): " + why);
  };
  std::string body;
  try {
    beast::tcp_stream stream(co_await asio::this_coro::executor);
    co_await connect(stream, server);
    http::request<http::string_body> request{http::verb::get, target, 11};
    co_await send(stream, request, server);
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    co_await read_header(stream, buffer, parser, server);
    const unsigned status = parser.get().result_int();
    body = co_await read_body_start(stream, buffer, parser, server, kModelListBytes);
    if (status != 200) throw RequestFailed(http_failure(status, body));
  } catch (const RequestFailed& e) {
    throw failed(e.what());
  }
  const auto models = parse_json(body, "GET " + target);
  if (!models.is_object() || !models.contains("data") || !models["data"].is_array() || models["data"].empty() ||
      !models["data"][0].is_object() || !models["data"][0].contains("id") || !models["data"][0]["id"].is_string())
    throw failed("no data[0].id in " + quoted_json(models));
  co_return models["data"][0]["id"].get<std::string>();
}

}  // namespace nanovllm::cli
