// The host communicator: the collectives the CPU backend's tensor parallelism runs on, between real threads.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "common/error.h"
#include "parallel/host_communicator.h"

namespace nanovllm {
namespace {

// Runs body(rank) on one thread per rank and joins them.
template <class Body>
void on_threads(int size, Body body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { body(r); });
  for (auto& t : threads) t.join();
}

// Three all-reduces back to back with fresh data each time: a fast rank moving on to the next one must not
// disturb slots the others are still reading. Every round is checked on every rank.
TEST(HostCommunicator, AllReduceGatherAndMinAgreeOnEveryRank) {
  constexpr int kRounds = 3;
  for (int size : {1, 2, 3, 4}) {
    HostCommunicatorGroup group(size);
    const int n = 1003;  // odd
    std::mt19937 rng(size);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    // data[round][rank]; reduced in place, so `expected` is taken first.
    std::vector<std::vector<std::vector<float>>> data(kRounds,
                                                      std::vector<std::vector<float>>(size, std::vector<float>(n)));
    std::vector<std::vector<float>> expected(kRounds, std::vector<float>(n, 0.0f));
    for (int k = 0; k < kRounds; ++k)
      for (int r = 0; r < size; ++r)
        for (int i = 0; i < n; ++i) {
          data[k][r][i] = u(rng);
          expected[k][i] += data[k][r][i];
        }
    std::vector<float> gathered(static_cast<size_t>(size) * 5, -1.0f);
    std::vector<int64_t> minima(size);
    on_threads(size, [&](int r) {
      Communicator& comm = group.rank(r);
      for (int k = 0; k < kRounds; ++k) {
        Tensor t(data[k][r].data(), DType::F32, {n});
        comm.all_reduce_sum(t);
      }
      std::vector<float> chunk(5);
      for (int j = 0; j < 5; ++j) chunk[j] = static_cast<float>(r * 10 + j);
      Tensor out(gathered.data(), DType::F32, {size, 5});
      Tensor empty;
      comm.gather_to_first(Tensor(chunk.data(), DType::F32, {5}), r == 0 ? out : empty);
      minima[r] = comm.min_over_ranks(100 - 7 * r);
    });
    for (int k = 0; k < kRounds; ++k)
      for (int r = 0; r < size; ++r)
        for (int i = 0; i < n; ++i)  // summed from 0 in rank order, as `expected` was: exactly the same float
          ASSERT_EQ(data[k][r][i], expected[k][i]) << "round " << k << " rank " << r << " element " << i;
    for (int r = 0; r < size; ++r) {
      for (int j = 0; j < 5; ++j) EXPECT_EQ(gathered[r * 5 + j], static_cast<float>(r * 10 + j));
      EXPECT_EQ(minima[r], 100 - 7 * (size - 1));
    }
  }
}

// A rank that never arrives must not leave the others waiting: abort() releases them with its reason, and
// every later collective refuses at once.
TEST(HostCommunicator, AbortReleasesWaitingRanks) {
  HostCommunicatorGroup group(3);
  std::vector<std::string> errors(3);
  on_threads(3, [&](int r) {
    try {
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        group.abort("rank 1: out of memory");
        return;
      }
      std::vector<float> x(8, 1.0f);
      Tensor t(x.data(), DType::F32, {8});
      group.rank(r).all_reduce_sum(t);
    } catch (const EngineError& e) {
      errors[r] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("rank 1: out of memory"), std::string::npos) << errors[0];
  EXPECT_NE(errors[2].find("rank 1: out of memory"), std::string::npos) << errors[2];
  EXPECT_THROW(group.rank(0).min_over_ranks(3), EngineError);
}

}  // namespace
}  // namespace nanovllm
