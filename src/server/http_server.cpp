#include "server/http_server.h"

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <list>
#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm::server {

namespace {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr auto kRequestTimeout = std::chrono::seconds(60);  // to read one request, and idle keep-alive
constexpr auto kWriteTimeout = std::chrono::seconds(60);    // for a client to take one piece of a reply

// Engine wake-ups may come at any time from the engine thread; once the server is going away they must no
// longer reach its executors. Every wake-up goes through the gate, which the server closes before it ends.
struct WakeupGate {
  std::mutex mutex;
  bool open = true;
};

class Session;

// What the connections share: the API, their registry (for shutdown), the gate.
struct Shared {
  Shared(OpenAiApi& a, size_t max_body) : api(a), max_body_bytes(max_body) {}
  OpenAiApi& api;
  size_t max_body_bytes;
  std::shared_ptr<WakeupGate> gate = std::make_shared<WakeupGate>();
  std::mutex mutex;
  std::condition_variable all_closed;
  std::list<std::weak_ptr<Session>> sessions;
  bool stopping = false;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared) : stream_(std::move(socket)), shared_(shared) {}
  ~Session() {
    if (!registered_) return;
    std::lock_guard lock(shared_.mutex);
    shared_.sessions.erase(registration_);
    if (shared_.sessions.empty()) shared_.all_closed.notify_all();
  }

  // Registers and starts reading; false when the server is already stopping.
  bool start() {
    {
      std::lock_guard lock(shared_.mutex);
      if (shared_.stopping) return false;
      registration_ = shared_.sessions.insert(shared_.sessions.end(), weak_from_this());
      registered_ = true;
    }
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
    return true;
  }

  // Shutdown: abort what runs (its stream still ends properly), close when idle.
  void shut_down() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      if (self->generation_) self->generation_->abort();
      else if (!self->writing_) self->close();
    });
  }

 private:
  void read_request() {
    if (closing_) return close();
    parser_.emplace();
    parser_->body_limit(shared_.max_body_bytes);
    stream_.expires_after(kRequestTimeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
  }

  // A client that sent "Expect: 100-continue" (curl does for bodies over 1 KiB) waits for a go-ahead before
  // the body; one whose head is refused (a body over the limit) gets the refusal instead.
  void on_head(beast::error_code ec) {
    if (ec || parser_->is_done()) return on_request(ec);
    const auto read_body = [self = shared_from_this()] {
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](beast::error_code read_ec, size_t) { self->on_request(read_ec); });
    };
    if (!beast::iequals(parser_->get()[http::field::expect], "100-continue")) return read_body();
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this(), read_body](beast::error_code write_ec, size_t) {
                       if (write_ec) return self->close();
                       read_body();
                     });
  }

  void on_request(beast::error_code ec) {
    if (ec == http::error::body_limit || ec == http::error::header_limit) {
      return refuse(ApiError(413, ec == http::error::body_limit
                                      ? "the request body is over the server's limit of " +
                                            std::to_string(shared_.max_body_bytes) + " bytes"
                                      : std::string("the request head is over the server's limit of 8192 bytes")));
    }
    const bool malformed = ec.category() == http::make_error_code(http::error::bad_method).category() &&
                           ec != http::error::end_of_stream && ec != http::error::partial_message;
    if (malformed) return refuse(ApiError(400, "malformed HTTP request: " + ec.message()));
    if (ec) return close();  // the client left or timed out
    http::request<http::string_body>& req = parser_->get();
    keep_alive_ = req.keep_alive() && !closing_;
    ApiRequest request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    if (auto it = req.find(http::field::authorization); it != req.end())
      request.authorization = std::string(it->value());
    request.body = std::move(parser_->get().body());
    ++exchange_;
    ApiResult result = shared_.api.handle(request, wakeup());
    if (auto* reply = std::get_if<HttpReply>(&result)) return write_reply(std::move(*reply));
    generation_ = std::move(std::get<std::unique_ptr<Generation>>(result));
    // Nothing else need hold the connection while the engine works (the disconnect watch ends when the client
    // sends more): it holds itself until the generation is gone.
    keep_self_ = shared_from_this();
    stream_.expires_never();
    watch_for_disconnect();
    poll();
  }

  // The engine's wake-up for this connection's requests: a poll on this connection's strand.
  AsyncEngine::Wakeup wakeup() {
    return [gate = shared_.gate, weak = weak_from_this()] {
      std::lock_guard lock(gate->mutex);
      if (!gate->open) return;
      if (auto self = weak.lock()) self->schedule_poll();
    };
  }

  void schedule_poll() {
    if (poll_scheduled_.exchange(true)) return;  // one is on its way: it will take everything there is
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->poll_scheduled_ = false;
      self->poll();
    });
  }

  // While a generation runs the client sends nothing; the socket turning readable means it closed (or sent the
  // next request early, which waits in the socket). A wake-up is not proof: with several I/O threads the reactor
  // may report a readiness that a read on another thread has already consumed, so a peek decides, and a wait
  // that finds nothing there is simply made again.
  void watch_for_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = shared_from_this(), exchange = exchange_](beast::error_code ec) {
                                  if (exchange != self->exchange_ || !self->generation_) return;
                                  if (ec == net::error::operation_aborted) return;  // the connection is closing
                                  if (ec) return self->client_left();
                                  switch (self->peek()) {
                                    case Peek::kNothing:
                                      return self->watch_for_disconnect();
                                    case Peek::kClosed:
                                      return self->client_left();
                                    case Peek::kData:
                                      return;  // the next request, read once this one is answered
                                  }
                                });
  }

  enum class Peek { kNothing, kData, kClosed };
  // What the socket holds, without taking it or waiting: data, the peer's end (or an error), or nothing yet.
  Peek peek() {
    char byte = 0;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return Peek::kData;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Peek::kNothing;
    return Peek::kClosed;
  }

  // A reply to a request that could not be read whole, then the end of the connection: what the client still
  // sends is read and dropped for a while, so that it gets to read the reply instead of a reset.
  void refuse(const ApiError& error) {
    keep_alive_ = false;
    lingering_ = true;
    write_reply(error_reply(error));
  }

  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(5));
    stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->linger();
    });
  }

  void client_left() {
    end_generation();  // aborts its requests
    close();
  }

  void end_generation() {
    generation_.reset();
    net::post(stream_.get_executor(), [self = std::move(keep_self_)] {});  // released after this handler
  }

  void poll() {
    if (!generation_) return;
    Generation::Progress progress = generation_->poll();
    const bool streaming = generation_->streaming();
    if (progress.end) {
      stream_ended_ = streaming && !progress.reply;
      end_generation();
    }
    if (progress.reply) return write_reply(std::move(*progress.reply));
    if (!streaming || (progress.events.empty() && !stream_ended_)) return;  // nothing to send yet
    events_ += progress.events;
    write_events();
  }

  void write_reply(HttpReply reply) {
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(reply.status), 11);
    res->set(http::field::server, "nanovllm");
    res->set(http::field::content_type, reply.content_type);
    res->keep_alive(keep_alive_);
    res->body() = std::move(reply.body);
    res->prepare_payload();
    writing_ = true;
    stream_.expires_after(kWriteTimeout);
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->close();
      self->next_exchange();
    });
  }

  // Streamed: the head once, then each batch of events as one chunk, then the last chunk.
  void write_events() {
    if (writing_) return;
    if (!head_sent_) {
      sse_head_.emplace(http::status::ok, 11);
      sse_head_->set(http::field::server, "nanovllm");
      sse_head_->set(http::field::content_type, "text/event-stream");
      sse_head_->set(http::field::cache_control, "no-cache");
      sse_head_->keep_alive(keep_alive_);
      sse_head_->chunked(true);
      sse_serializer_.emplace(*sse_head_);
      return write_piece([this](auto done) { http::async_write_header(stream_, *sse_serializer_, done); },
                         [this] { head_sent_ = true; });
    }
    if (!events_.empty()) {
      writing_events_ = std::move(events_);
      events_.clear();
      return write_piece(
          [this](auto done) { net::async_write(stream_, http::make_chunk(net::buffer(writing_events_)), done); },
          [] {});
    }
    if (stream_ended_) {
      stream_ended_ = false;
      return write_piece([this](auto done) { net::async_write(stream_, http::make_chunk_last(), done); },
                         [this] {
                           head_sent_ = false;
                           last_chunk_sent_ = true;
                         });
    }
  }

  template <class Start, class After>
  void write_piece(Start start, After after) {
    writing_ = true;
    stream_.expires_after(kWriteTimeout);
    start([self = shared_from_this(), after](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->client_left();  // a write that fails means the client is gone
      // The next piece waits for the engine, however long that takes (an expired timer would fail it).
      self->stream_.expires_never();
      after();
      if (self->last_chunk_sent_) {
        self->last_chunk_sent_ = false;
        return self->next_exchange();
      }
      self->write_events();
    });
  }

  void next_exchange() {
    sse_serializer_.reset();
    sse_head_.reset();
    if (lingering_) return linger();
    if (!keep_alive_ || closing_) return close();
    read_request();
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  Shared& shared_;
  std::list<std::weak_ptr<Session>>::iterator registration_;
  bool registered_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::unique_ptr<Generation> generation_;
  std::shared_ptr<Session> keep_self_;  // set while generation_ is
  std::atomic<bool> poll_scheduled_{false};
  uint64_t exchange_ = 0;  // which request a disconnect watch belongs to
  bool keep_alive_ = true;
  bool closing_ = false;
  bool writing_ = false;
  bool head_sent_ = false;
  bool stream_ended_ = false;  // the events hold the stream's end: send the last chunk after them
  bool last_chunk_sent_ = false;
  bool lingering_ = false;
  std::array<char, 4096> discard_{};
  std::string events_;          // streamed events not yet written
  std::string writing_events_;  // the chunk being written
  std::optional<http::response<http::empty_body>> sse_head_;
  std::optional<http::response_serializer<http::empty_body>> sse_serializer_;
};
}  // namespace

struct HttpServer::Impl {
  Impl(OpenAiApi& api, size_t max_body_bytes) : shared(api, max_body_bytes) {}

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) {
        auto session = std::make_shared<Session>(std::move(socket), shared);
        session->start();
      }
      accept();  // a failed accept (out of file descriptors) must not end accepting
    });
  }

  Shared shared;  // before the io_context: sessions that die with its handlers still deregister
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::mutex mutex;
  std::condition_variable stop_requested;
  bool stop = false;
  int io_threads = 1;
};

HttpServer::HttpServer(OpenAiApi& api, const std::string& host, int port, int io_threads, size_t max_body_bytes)
    : impl_(std::make_unique<Impl>(api, max_body_bytes)) {
  impl_->io_threads = std::max(1, io_threads);
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(host, ec);
  if (ec) throw InvalidInput("--host must be an IP address, got " + quoted_text(host));
  if (port < 0 || port > 65535) throw InvalidInput("--port must be in [0, 65535], got " + std::to_string(port));
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  tcp::acceptor& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw InvalidInput("cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
}

HttpServer::~HttpServer() = default;

int HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->stop_requested.notify_all();
}

void HttpServer::run(bool handle_signals, double drain_seconds) {
  Impl& s = *impl_;
  auto work = net::make_work_guard(s.ioc);
  net::signal_set signals(s.ioc);
  if (handle_signals) {
    signals.add(SIGINT);
    signals.add(SIGTERM);
    signals.async_wait([this](beast::error_code ec, int) {
      if (!ec) stop();
    });
  }
  s.accept();
  std::vector<std::thread> threads;
  for (int i = 0; i < s.io_threads; ++i) threads.emplace_back([&s] { s.ioc.run(); });

  {
    std::unique_lock lock(s.mutex);
    s.stop_requested.wait(lock, [&] { return s.stop; });
  }
  // No new connections; the open ones abort what runs and close once it has ended.
  net::post(s.acceptor.get_executor(), [&s, &signals] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    signals.cancel(ignored);
  });
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(s.shared.mutex);
    s.shared.stopping = true;
    for (const std::weak_ptr<Session>& weak : s.shared.sessions)
      if (auto session = weak.lock()) open.push_back(std::move(session));
  }
  for (const auto& session : open) session->shut_down();
  open.clear();
  {
    std::unique_lock lock(s.shared.mutex);
    s.shared.all_closed.wait_for(lock, std::chrono::duration<double>(drain_seconds),
                                 [&] { return s.shared.sessions.empty(); });
  }
  {
    std::lock_guard lock(s.shared.gate->mutex);
    s.shared.gate->open = false;
  }
  work.reset();
  s.ioc.stop();
  for (std::thread& t : threads) t.join();
}

}  // namespace nanovllm::server
