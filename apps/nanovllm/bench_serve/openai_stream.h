#pragma once
// The HTTP side of a serving benchmark, on Boost.Beast over Asio coroutines: each request is one streamed
// POST on its own connection, timed as its server-sent events arrive, so that many requests run at once on
// one thread.
#include <chrono>
#include <string>
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "bench_serve/serve_report.h"

namespace nanovllm::cli {

// Where requests go: the server's resolved addresses, its Host header, and how long a request may wait
// for the next bytes before it counts as failed.
struct HttpServer {
  boost::asio::ip::tcp::resolver::results_type endpoints;
  std::string host_header;
  std::chrono::milliseconds read_timeout{600'000};
};

// POSTs `body` (an OpenAI completion request with "stream": true and stream_options.include_usage) to `target` and
// times it: TTFT at the first event with text, ITL between events with text, output tokens from the final usage. Never
// throws: a failure (connection, HTTP status, malformed or cut-short stream, an error event) is a kFailed outcome whose
// error says why.
boost::asio::awaitable<RequestOutcome> stream_completion(const HttpServer& server, const std::string& target,
                                                         const std::string& body, int prompt_tokens);

// The id of the first model GET `target` (/v1/models) lists. Throws InvalidInput saying why there is none.
boost::asio::awaitable<std::string> first_served_model(const HttpServer& server, const std::string& target);

}  // namespace nanovllm::cli
