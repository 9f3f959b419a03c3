#pragma once
// The HTTP/1.1 server on Boost.Beast and Asio: a few I/O threads run every connection asynchronously, so a
// thousand open streams cost a thousand sockets and buffers, not a thousand threads. A generation's engine
// wake-up (AsyncEngine's on_ready) posts to its connection's strand, which then drains the streams with
// try_next() and writes; while a generation runs, the connection also waits for the socket to turn readable,
// which is how a client that leaves (even from a stream with nothing to send) is noticed and its requests
// aborted.
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/openai_api.h"

namespace nanovllm::server {

class HttpServer {
 public:
  // Binds host:port (port 0: any free one) and starts listening; throws InvalidInput when it cannot.
  HttpServer(OpenAiApi& api, const std::string& host, int port, int io_threads, size_t max_body_bytes);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;  // the bound port
  // Serves until stop() or, with `handle_signals`, SIGINT / SIGTERM. Then: no new connections, requests in
  // flight aborted (streams get their last chunks and [DONE]), idle connections closed; returns once every
  // connection is done (or after `drain_seconds`).
  void run(bool handle_signals, double drain_seconds = 10.0);
  // Any thread; returns at once (run() does the rest).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanovllm::server
