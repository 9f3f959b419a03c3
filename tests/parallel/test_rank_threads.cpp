// RankThreads: every rank runs each task, rank 0 on the caller; a failing rank releases the others through
// on_failure and its error comes back with its rank named, keeping InvalidInput apart from engine errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/error.h"
#include "parallel/host_communicator.h"
#include "parallel/rank_threads.h"

namespace nanovllm {
namespace {

TEST(RankThreads, RunsEveryRankOnItsOwnThreadManyTimes) {
  RankThreads threads(4);
  std::vector<std::thread::id> ids(4);
  std::atomic<int> calls{0};
  for (int step = 0; step < 500; ++step) {
    threads.run(
        [&](int r) {
          ids[r] = std::this_thread::get_id();
          calls.fetch_add(1);
        },
        [](const std::string&) { FAIL() << "no rank fails"; });
  }
  EXPECT_EQ(calls.load(), 2000);
  EXPECT_EQ(ids[0], std::this_thread::get_id());
  for (int r = 1; r < 4; ++r) EXPECT_NE(ids[r], ids[0]);
}

// Rank 2 fails before its all-reduce while ranks 0, 1 and 3 wait in it: without the abort they would wait
// forever. The error is rank 2's, as InvalidInput, and it arrives within seconds.
TEST(RankThreads, AFailingRankReleasesTheOthersAndIsReported) {
  RankThreads threads(4);
  HostCommunicatorGroup group(4);
  const auto start = std::chrono::steady_clock::now();
  try {
    threads.run(
        [&](int r) {
          if (r == 2) throw InvalidInput("model.safetensors: tensor 'x' is truncated");
          std::vector<float> x(16, 1.0f);
          Tensor t(x.data(), DType::F32, {16});
          group.rank(r).all_reduce_sum(t);
        },
        [&](const std::string& why) { group.abort(why); });
    FAIL() << "the failure was not reported";
  } catch (const InvalidInput& e) {
    EXPECT_STREQ(e.what(), "tensor-parallel rank 2: model.safetensors: tensor 'x' is truncated");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  // Engine errors stay engine errors; the threads are still usable for the next task.
  EXPECT_THROW(threads.run(
                   [](int r) {
                     if (r == 3) throw std::runtime_error("boom");
                   },
                   [](const std::string&) {}),
               EngineError);
  int ran = 0;
  threads.run(
      [&](int r) {
        if (r == 0) ran = 1;
      },
      [](const std::string&) {});
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace nanovllm
