// bench-serve end to end against an in-process fake OpenAI server with known delays: the counts, the
// failure reasons, and TTFT / ITL / TPOT near the delays the server injects.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <unistd.h>

#include "bench_serve/arrival_schedule.h"
#include "bench_serve/load_generator.h"
#include "common/error.h"
#include "fake_openai_server.h"

namespace nanovllm::cli {
namespace {

using Fake = FakeOpenAiServer;

ServeRequest request(int first_token, int length) {
  ServeRequest r;
  std::vector<int> prompt(length, 7);
  prompt[0] = first_token;
  r.body = {{"prompt", prompt},   {"max_tokens", Fake::kChunks},
            {"temperature", 0.6}, {"ignore_eos", true},
            {"stream", true},     {"stream_options", {{"include_usage", true}}}};
  r.prompt_tokens = length;
  return r;
}

LoadOptions options_for(const Fake& server) {
  LoadOptions o;
  o.server = BaseUrl::parse("http://127.0.0.1:" + std::to_string(server.port()));
  o.stop_on_signals = false;
  return o;
}

double ms(std::chrono::milliseconds d) { return static_cast<double>(d.count()); }

TEST(BenchServeRun, MeasuresTheInjectedDelaysAndCountsFailures) {
  Fake server;
  std::vector<ServeRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back(request(1, 10 + i));
  for (int failing : {Fake::kHttp500, Fake::kNotJson, Fake::kCutShort, Fake::kNoUsage, Fake::kErrorEvent})
    requests.push_back(request(failing, 3));
  LoadOptions o = options_for(server);
  o.max_concurrency = 4;
  const LoadRun run = run_load(o, requests);
  EXPECT_EQ(run.model, Fake::kModel);  // asked GET /v1/models
  const ServeReport r = ServeReport::of(run.outcomes, run.duration_s);
  EXPECT_EQ(r.completed, 8);
  EXPECT_EQ(r.failed, 5);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(run.outcomes[i].state, RequestOutcome::State::kCompleted) << run.outcomes[i].error;
  EXPECT_EQ(run.outcomes[8].error, "HTTP 500: boom");
  EXPECT_EQ(run.outcomes[9].error, "malformed stream: data is not JSON: '{oops'");
  EXPECT_EQ(run.outcomes[10].error, "the stream ended before data: [DONE]");
  EXPECT_EQ(run.outcomes[11].error, "no usage in the stream (stream_options.include_usage ignored)");
  EXPECT_EQ(run.outcomes[12].error, "error event: engine died");
  EXPECT_EQ(r.input_tokens, 10 + 11 + 12 + 13 + 14 + 15 + 16 + 17);
  EXPECT_EQ(r.output_tokens, 8 * Fake::kChunks);
  // The delays are lower bounds; a loaded machine adds to them, never takes away.
  EXPECT_GE(r.ttft_ms.mean, ms(Fake::kFirstDelay) * 0.95);
  EXPECT_LT(r.ttft_ms.mean, ms(Fake::kFirstDelay) + 60);
  EXPECT_EQ(r.itl_ms.count, 8u * (Fake::kChunks - 1));
  EXPECT_GE(r.itl_ms.p50, ms(Fake::kGap) * 0.9);
  EXPECT_LT(r.itl_ms.p50, ms(Fake::kGap) + 40);
  EXPECT_GE(r.tpot_ms.mean, ms(Fake::kGap) * 0.9);
  EXPECT_LT(r.tpot_ms.mean, ms(Fake::kGap) + 40);
  // 13 requests, 4 at a time: at least three waves of at least one whole stream each.
  const double stream_ms = ms(Fake::kFirstDelay) + (Fake::kChunks - 1) * ms(Fake::kGap);
  EXPECT_GE(run.duration_s * 1e3, 2 * stream_ms);
}

TEST(BenchServeRun, PoissonArrivalsSpreadTheRequests) {
  Fake server;
  LoadOptions o = options_for(server);
  o.model = Fake::kModel;
  o.request_rate = 20;
  o.seed = 3;
  const std::vector<ServeRequest> requests(6, request(1, 4));
  const auto start = std::chrono::steady_clock::now();
  const LoadRun run = run_load(o, requests);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(ServeReport::of(run.outcomes, run.duration_s).completed, 6);
  const std::vector<double> arrivals = poisson_arrivals(6, 20, 3);
  EXPECT_GE(wall, arrivals.back());  // the last request waited for its time
}

TEST(BenchServeRun, SilentServerTimesOut) {
  Fake server;
  LoadOptions o = options_for(server);
  o.model = Fake::kModel;
  o.read_timeout_s = 0.3;
  const LoadRun run = run_load(o, {request(Fake::kSilent, 3)});
  ASSERT_EQ(run.outcomes.size(), 1u);
  EXPECT_EQ(run.outcomes[0].error, "reading the response: no answer in time (--read-timeout)");
  EXPECT_LT(run.duration_s, 3.0);
}

TEST(BenchServeRun, SigintStopsTheRunWithWhatCompleted) {
  Fake server;
  LoadOptions o = options_for(server);
  o.model = Fake::kModel;
  o.stop_on_signals = true;
  const std::vector<ServeRequest> requests = {request(1, 3), request(Fake::kSilent, 3), request(1, 3)};
  std::thread interrupt([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));  // the two quick streams take ~0.2 s
    ::kill(::getpid(), SIGINT);
  });
  const LoadRun run = run_load(o, requests);
  interrupt.join();
  EXPECT_EQ(run.stopped_by_signal, SIGINT);
  const ServeReport r = ServeReport::of(run.outcomes, run.duration_s);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.unfinished, 1);
  EXPECT_GE(run.duration_s, 0.7);
  EXPECT_LT(run.duration_s, 3.0);
}

TEST(BenchServeRun, RefusedConnectionsFailEveryRequest) {
  unsigned short closed_port = 0;
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor probe(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    closed_port = probe.local_endpoint().port();
  }
  LoadOptions o;
  o.server = BaseUrl::parse("http://127.0.0.1:" + std::to_string(closed_port));
  o.model = "m";
  o.stop_on_signals = false;
  const LoadRun run = run_load(o, std::vector<ServeRequest>(3, request(1, 2)));
  const ServeReport r = ServeReport::of(run.outcomes, run.duration_s);
  EXPECT_EQ(r.failed, 3);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].first, "connect: Connection refused");
  o.model.clear();  // the model query fails with a clear message instead
  EXPECT_THROW(
      {
        try {
          run_load(o, std::vector<ServeRequest>(1, request(1, 2)));
        } catch (const InvalidInput& e) {
          EXPECT_STREQ(e.what(),
                       "cannot learn the model name from GET /v1/models (pass --model): connect: Connection refused");
          throw;
        }
      },
      InvalidInput);
}

}  // namespace
}  // namespace nanovllm::cli
