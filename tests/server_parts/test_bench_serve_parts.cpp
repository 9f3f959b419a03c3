// bench-serve's parts that need no network: SSE parsing, the arrival schedule, statistics, the report and
// the base URL.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bench_serve/arrival_schedule.h"
#include "bench_serve/base_url.h"
#include "bench_serve/latency_stats.h"
#include "bench_serve/serve_report.h"
#include "bench_serve/sse_parser.h"
#include "common/error.h"

namespace nanovllm::cli {
namespace {

std::vector<std::string> data_of(const std::vector<SseEvent>& events) {
  std::vector<std::string> data;
  for (const SseEvent& e : events) data.push_back(e.data);
  return data;
}

const std::string kStream =
    ": a comment line\n"
    "data: {\"a\": 1}\n\n"
    "event: note\r\ndata:first\r\ndata: second\r\n\r\n"
    "id: 7\nretry: 10\n\n"  // an event without data: no event
    "data\rdata:  two spaces\r\r"
    "data: [DONE]\n\n";

TEST(SseParser, WholeStream) {
  SseParser parser;
  const std::vector<SseEvent> events = parser.feed(kStream);
  EXPECT_EQ(data_of(events), (std::vector<std::string>{"{\"a\": 1}", "first\nsecond", "\n two spaces", "[DONE]"}));
  EXPECT_EQ(events[1].type, "note");
  EXPECT_EQ(events[0].type, "");
  EXPECT_FALSE(parser.mid_event());
}

TEST(SseParser, SameEventsHoweverTheBytesAreSplit) {
  const std::vector<std::string> whole = data_of(SseParser().feed(kStream));
  for (size_t a = 0; a <= kStream.size(); ++a) {
    for (size_t b = a; b <= kStream.size(); b += 7) {
      SseParser parser;
      std::vector<SseEvent> events = parser.feed(kStream.substr(0, a));
      for (SseEvent& e : parser.feed(kStream.substr(a, b - a))) events.push_back(std::move(e));
      for (SseEvent& e : parser.feed(kStream.substr(b))) events.push_back(std::move(e));
      ASSERT_EQ(data_of(events), whole) << "cut at " << a << " and " << b;
    }
  }
}

TEST(SseParser, KnowsWhenCutMidEvent) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("data: {\"partial\"").empty());
  EXPECT_TRUE(parser.mid_event());
  EXPECT_TRUE(parser.feed("}\n").empty());
  EXPECT_TRUE(parser.mid_event());  // data without the blank line that ends the event
  EXPECT_EQ(data_of(parser.feed("\n")), std::vector<std::string>{"{\"partial\"}"});
  EXPECT_FALSE(parser.mid_event());
}

TEST(SseParser, RefusesEndlessEvents) {
  SseParser parser(64);
  EXPECT_NO_THROW(parser.feed("data: " + std::string(40, 'x') + "\n"));
  EXPECT_THROW(parser.feed("data: " + std::string(40, 'y')), SseError);
}

TEST(ArrivalSchedule, InfiniteRateSendsAllAtOnce) {
  EXPECT_EQ(poisson_arrivals(4, std::numeric_limits<double>::infinity(), 1), std::vector<double>(4, 0.0));
  EXPECT_TRUE(poisson_arrivals(0, 2.0, 1).empty());
}

TEST(ArrivalSchedule, SeededPoissonProcess) {
  const std::vector<double> a = poisson_arrivals(20000, 10.0, 42);
  EXPECT_EQ(a, poisson_arrivals(20000, 10.0, 42));
  EXPECT_NE(a, poisson_arrivals(20000, 10.0, 43));
  EXPECT_EQ(a[0], 0.0);
  std::vector<double> gaps;
  for (size_t i = 1; i < a.size(); ++i) gaps.push_back(a[i] - a[i - 1]);
  double mean = 0, var = 0;
  for (double g : gaps) mean += g / gaps.size();
  for (double g : gaps) var += (g - mean) * (g - mean) / gaps.size();
  EXPECT_NEAR(mean, 0.1, 0.003);                                  // 1 / rate
  EXPECT_NEAR(std::sqrt(var), 0.1, 0.005);                        // exponential: the deviation equals the mean
  EXPECT_NEAR(percentile(gaps, 50), 0.1 * std::log(2.0), 0.004);  // and the median is ln 2 / rate
  for (double g : gaps) ASSERT_GE(g, 0.0);
}

TEST(ArrivalSchedule, RejectsBadRates) {
  EXPECT_THROW(poisson_arrivals(3, 0.0, 0), InvalidInput);
  EXPECT_THROW(poisson_arrivals(3, -1.0, 0), InvalidInput);
  EXPECT_THROW(poisson_arrivals(3, std::nan(""), 0), InvalidInput);
  EXPECT_TRUE(std::isinf(parse_request_rate("inf")));
  EXPECT_EQ(parse_request_rate("2.5"), 2.5);
  for (const char* bad : {"0", "-3", "abc", "", "2x", "1e999"})
    EXPECT_THROW(parse_request_rate(bad), InvalidInput) << bad;
}

TEST(LatencyStats, PercentilesInterpolateLikeNumpy) {
  const std::vector<double> v = {5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 3);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 4.6);  // numpy.percentile([1,2,3,4,5], 90)
  EXPECT_DOUBLE_EQ(percentile(v, 99), 4.96);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 5);
  EXPECT_DOUBLE_EQ(percentile({7}, 90), 7);
  EXPECT_EQ(percentile({}, 50), 0);
  const LatencySummary s = LatencySummary::of({10, 20, 30, 40});
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.mean, 25);
  EXPECT_DOUBLE_EQ(s.p50, 25);
  EXPECT_DOUBLE_EQ(s.p90, 37);
  EXPECT_DOUBLE_EQ(s.p99, 39.7);
}

RequestOutcome completed(int prompt, int output, double ttft, double latency, std::vector<double> itl) {
  RequestOutcome o;
  o.state = RequestOutcome::State::kCompleted;
  o.prompt_tokens = prompt, o.output_tokens = output, o.ttft_s = ttft, o.latency_s = latency, o.itl_s = itl;
  return o;
}

RequestOutcome failed(const std::string& why) {
  RequestOutcome o;
  o.state = RequestOutcome::State::kFailed;
  o.error = why;
  return o;
}

TEST(ServeReport, SummarisesOutcomes) {
  const std::vector<RequestOutcome> outcomes = {
      completed(100, 11, 0.1, 1.1, {0.1, 0.1}),  // TPOT (1.1 - 0.1) / 10 = 100 ms
      completed(50, 5, 0.3, 0.7, {0.2}),         // TPOT 0.4 / 4 = 100 ms
      completed(10, 1, 0.2, 0.2, {}),            // one token: no TPOT
      failed("HTTP 500: boom"),
      failed("connect: Connection refused"),
      failed("HTTP 500: boom"),
      RequestOutcome{}};
  const ServeReport r = ServeReport::of(outcomes, 2.0);
  EXPECT_EQ(r.completed, 3);
  EXPECT_EQ(r.failed, 3);
  EXPECT_EQ(r.unfinished, 1);
  EXPECT_EQ(r.input_tokens, 160);
  EXPECT_EQ(r.output_tokens, 17);
  EXPECT_DOUBLE_EQ(r.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(r.output_throughput, 8.5);
  EXPECT_DOUBLE_EQ(r.input_throughput, 80);
  EXPECT_NEAR(r.ttft_ms.mean, 200, 1e-9);
  EXPECT_EQ(r.tpot_ms.count, 2u);
  EXPECT_NEAR(r.tpot_ms.mean, 100, 1e-9);
  EXPECT_EQ(r.itl_ms.count, 3u);
  EXPECT_NEAR(r.itl_ms.p50, 100, 1e-9);
  EXPECT_NEAR(r.e2el_ms.p50, 700, 1e-9);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0], (std::pair<std::string, int>{"HTTP 500: boom", 2}));
  const std::string text = r.text();
  EXPECT_NE(text.find("2 x HTTP 500: boom"), std::string::npos) << text;
  EXPECT_NE(text.find("unfinished (interrupted): 1"), std::string::npos) << text;
  const auto j = r.json();
  EXPECT_EQ(j["completed"], 3);
  EXPECT_DOUBLE_EQ(j["median_e2el_ms"].get<double>(), 700);
  EXPECT_EQ(j["errors"]["connect: Connection refused"], 1);
}

TEST(BaseUrl, Parses) {
  BaseUrl u = BaseUrl::parse("http://127.0.0.1:8000");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, "8000");
  EXPECT_EQ(u.target("/v1/completions"), "/v1/completions");
  u = BaseUrl::parse("http://example.com/prefix/");
  EXPECT_EQ(u.port, "80");
  EXPECT_EQ(u.target("/v1/models"), "/prefix/v1/models");
  EXPECT_EQ(u.host_header(), "example.com:80");
  u = BaseUrl::parse("http://[::1]:9000");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.host_header(), "[::1]:9000");
  for (const char* bad : {"127.0.0.1:8000", "https://x", "http://", "http://:80", "http://h:0", "http://h:99999",
                          "http://h:8a", "http://h:80/a b"})
    EXPECT_THROW(BaseUrl::parse(bad), InvalidInput) << bad;
}

}  // namespace
}  // namespace nanovllm::cli
