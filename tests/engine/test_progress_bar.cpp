#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "engine/progress_bar.h"

namespace nanovllm {
namespace {

// What the bar wrote, read back from a temporary file, with a clock the test moves by hand.
class ProgressBarTest : public ::testing::Test {
 protected:
  std::unique_ptr<ProgressBar> make(int total, ProgressBar::Style style) {
    return std::make_unique<ProgressBar>(
        total, style, file_.get(), [this] { return now_; }, 5.0);
  }
  std::string written() {
    std::fflush(file_.get());
    std::rewind(file_.get());
    std::string text;
    for (int c; (c = std::fgetc(file_.get())) != EOF;) text.push_back(static_cast<char>(c));
    return text;
  }
  static int count(const std::string& text, const std::string& part) {
    int n = 0;
    for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
  }

  double now_ = 100.0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{std::tmpfile(), &std::fclose};
};

TEST_F(ProgressBarTest, RatesAreOverallNotTheLastStep) {
  auto bar = make(4, ProgressBar::Style::Off);
  bar->update({0, 0, true, 1000, 0.5});  // 2000 tok/s
  bar->update({0, 0, true, 1000, 1.5});  // overall 1000 tok/s, the last step 667
  bar->update({0, 0, false, 4, 0.01});
  bar->update({0, 0, false, 4, 0.03});  // overall 200 tok/s, the last step 133
  EXPECT_NE(bar->status().find("prefill 1000 tok/s, decode 200 tok/s"), std::string::npos) << bar->status();
  EXPECT_EQ(written(), "");  // Off writes nothing, not even a summary
  bar->finish({});
  EXPECT_EQ(written(), "");
}

TEST_F(ProgressBarTest, ElapsedAndEtaFromFinishedRequests) {
  auto bar = make(4, ProgressBar::Style::Off);
  now_ += 3;
  EXPECT_NE(bar->status().find("0/4 requests [00:03<?]"), std::string::npos) << bar->status();
  bar->update({1, 10, false, 4, 0.1});
  now_ += 7;  // 10 s for one request: 30 s for the other three
  EXPECT_NE(bar->status().find("1/4 requests [00:10<00:30]"), std::string::npos) << bar->status();
  now_ += 3600;
  EXPECT_NE(bar->status().find("[1:00:10<3:00:30]"), std::string::npos) << bar->status();
}

TEST_F(ProgressBarTest, TerminalRedrawsOneLineAndEndsWithTheSummary) {
  auto bar = make(2, ProgressBar::Style::Terminal);
  bar->update({0, 0, true, 100, 0.1});
  bar->update({2, 7, false, 2, 0.1});
  now_ += 2;
  bar->finish({100, 25, 3});
  const std::string text = written();
  EXPECT_EQ(count(text, "\rGenerating ["), 3);  // drawn at start and after each step, on one line
  EXPECT_NE(text.find("[##############################] 2/2 requests"), std::string::npos) << text;
  EXPECT_EQ(count(text, "\n"), 2);  // the bar's line ended, then the summary
  EXPECT_NE(text.find("\nnanovllm: 2 requests in 2.00 s: 100 prompt tokens computed, 7 output tokens (3.5 tok/s), "
                      "prefix-cache hit rate 25.0%, 3 preemptions\n"),
            std::string::npos)
      << text;
}

TEST_F(ProgressBarTest, LogWritesALineEveryIntervalThenTheSummary) {
  auto bar = make(3, ProgressBar::Style::Log);
  bar->update({0, 0, true, 10, 0.1});
  now_ += 4.9;
  bar->update({1, 5, false, 1, 0.1});
  EXPECT_EQ(written(), "");  // nothing before the first interval
  now_ += 0.2;
  bar->update({1, 5, false, 1, 0.1});
  now_ += 1;
  bar->update({0, 0, false, 1, 0.1});
  now_ += 5;
  bar->update({1, 5, false, 1, 0.1});
  bar->finish({0, 0, 0});
  const std::string text = written();
  EXPECT_EQ(count(text, "nanovllm: generating: "), 2) << text;
  EXPECT_NE(text.find("nanovllm: generating: 2/3 requests [00:05<00:03]"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_NE(text.find("nanovllm: 3 requests in 11.10 s: 10 prompt tokens computed, 15 output tokens"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("prefix-cache hit rate n/a, 0 preemptions\n"), std::string::npos) << text;
}

TEST_F(ProgressBarTest, ARunCutShortStillEndsTheTerminalLine) {
  make(2, ProgressBar::Style::Terminal)->update({1, 3, true, 10, 0.1});
  const std::string text = written();
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find("nanovllm: "), std::string::npos);  // no summary without finish()
}

}  // namespace
}  // namespace nanovllm
