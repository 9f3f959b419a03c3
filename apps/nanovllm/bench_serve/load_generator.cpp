#include "bench_serve/load_generator.h"

#include <chrono>
#include <csignal>
#include <exception>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "bench_serve/arrival_schedule.h"
#include "bench_serve/openai_stream.h"
#include "common/error.h"

namespace nanovllm::cli {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// What the driver and the requests share; everything runs on one thread, so nothing needs a lock.
struct Run {
  Run(asio::io_context& io, const LoadOptions& o, const std::vector<ServeRequest>& r, LoadRun& out)
      : options(o), requests(r), result(out), slot_freed(io), signals(io) {}

  const LoadOptions& options;
  const std::vector<ServeRequest>& requests;
  LoadRun& result;
  HttpServer server;
  Clock::time_point start, end;
  int in_flight = 0;
  size_t finished = 0;
  bool all_sent = false;
  asio::steady_timer slot_freed;  // cancelled whenever a request ends, to wake a sender waiting for a slot
  asio::signal_set signals;

  void request_ended(size_t i, RequestOutcome outcome) {
    result.outcomes[i] = std::move(outcome);
    end = Clock::now();
    --in_flight;
    ++finished;
    slot_freed.cancel();
    if (all_sent && finished == requests.size()) signals.cancel();  // the last wait: the loop ends
  }
};

asio::awaitable<void> send_one(Run& run, size_t i) {
  nlohmann::ordered_json body = {{"model", run.result.model}};
  body.update(run.requests[i].body);
  RequestOutcome outcome = co_await stream_completion(run.server, run.options.server.target(run.options.endpoint),
                                                      body.dump(), run.requests[i].prompt_tokens);
  run.request_ended(i, std::move(outcome));
}

asio::awaitable<void> drive(Run& run, const std::vector<double>& arrivals) {
  const auto executor = co_await asio::this_coro::executor;
  const LoadOptions& o = run.options;
  asio::ip::tcp::resolver resolver(executor);
  boost::system::error_code ec;
  run.server.endpoints =
      co_await resolver.async_resolve(o.server.host, o.server.port, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) throw InvalidInput("cannot resolve the server's host '" + o.server.host + "': " + ec.message());
  run.server.host_header = o.server.host_header();
  run.server.read_timeout = std::chrono::milliseconds(static_cast<long long>(o.read_timeout_s * 1e3));
  // Not `model = empty ? co_await ... : model`: GCC 12 miscompiles co_await inside a conditional expression.
  run.result.model = o.model;
  if (o.model.empty()) run.result.model = co_await first_served_model(run.server, o.server.target("/v1/models"));

  run.start = run.end = Clock::now();
  asio::steady_timer next(executor);
  for (size_t i = 0; i < run.requests.size(); ++i) {
    next.expires_at(run.start +
                    std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
    co_await next.async_wait(asio::use_awaitable);
    while (o.max_concurrency > 0 && run.in_flight >= o.max_concurrency) {
      run.slot_freed.expires_at(Clock::time_point::max());
      co_await run.slot_freed.async_wait(asio::redirect_error(asio::use_awaitable, ec));  // cancelled: a slot
    }
    ++run.in_flight;
    asio::co_spawn(executor, send_one(run, i), asio::detached);
  }
}
}  // namespace

LoadRun run_load(const LoadOptions& options, const std::vector<ServeRequest>& requests) {
  if (options.max_concurrency < 0) throw InvalidInput("--max-concurrency must be >= 0 (0: no limit)");
  if (!(options.read_timeout_s > 0)) throw InvalidInput("--read-timeout must be > 0 seconds");
  const std::vector<double> arrivals =
      poisson_arrivals(static_cast<int>(requests.size()), options.request_rate, options.seed);
  LoadRun result;
  result.outcomes.resize(requests.size());
  std::exception_ptr failure;
  // Requests still in flight after a signal are dropped with the loop; their frames only hold their own
  // connections, so the order in which `run` and the loop go does not matter to them.
  asio::io_context io;
  Run run(io, options, requests, result);
  if (options.stop_on_signals) {
    run.signals.add(SIGINT);
    run.signals.add(SIGTERM);
    run.signals.async_wait([&](const boost::system::error_code& ec, int signal) {
      if (ec) return;
      result.stopped_by_signal = signal;
      run.end = Clock::now();
      io.stop();
    });
  }
  asio::co_spawn(io, drive(run, arrivals), [&](const std::exception_ptr& e) {
    failure = e;
    run.all_sent = true;
    if (e || run.finished == requests.size()) run.signals.cancel();
  });
  io.run();
  if (failure) std::rethrow_exception(failure);
  if (run.start != Clock::time_point{}) result.duration_s = seconds_between(run.start, run.end);
  return result;
}

}  // namespace nanovllm::cli
