#pragma once
// A small OpenAI-compatible server for bench-serve's tests, on Beast in its own thread. Completions stream
// kChunks text events, the first after kFirstDelay and the others kGap apart, then the usage and [DONE];
// the prompt's first token id picks a failure instead (see Behaviour).
#include <chrono>
#include <thread>
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace nanovllm::cli {

class FakeOpenAiServer {
 public:
  static constexpr auto kFirstDelay = std::chrono::milliseconds(80);
  static constexpr auto kGap = std::chrono::milliseconds(30);
  static constexpr int kChunks = 5;
  static constexpr const char* kModel = "fake-model";
  // The prompt's first token id that makes a completion fail, and how.
  enum Behaviour : int {
    kHttp500 = 500,     // HTTP 500 with an OpenAI error body
    kNotJson = 501,     // an event whose data is not JSON
    kCutShort = 502,    // the connection closes after one event
    kNoUsage = 503,     // [DONE] without a usage chunk
    kSilent = 504,      // the header, then nothing for seconds
    kErrorEvent = 505,  // an error event mid-stream, as vLLM sends when generation fails
  };

  FakeOpenAiServer();
  ~FakeOpenAiServer();
  FakeOpenAiServer(const FakeOpenAiServer&) = delete;
  FakeOpenAiServer& operator=(const FakeOpenAiServer&) = delete;

  unsigned short port() const { return port_; }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  std::thread thread_;
};

}  // namespace nanovllm::cli
