// NCCL collectives between the visible GPUs (skipped with fewer than 2): sums and gathers against the host,
// replayed from CUDA graphs, and a failing rank that must not leave the others waiting.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "backend/cuda/cuda_backend.h"
#include "common/half_float.h"
#include "engine/device_support.h"
#include "parallel/rank_threads.h"

namespace nanovllm {
namespace {

struct Group {
  std::vector<std::unique_ptr<Backend>> backends;
  std::unique_ptr<CommunicatorGroup> comms;
  std::unique_ptr<RankThreads> threads;
  explicit Group(int size) : backends(make_rank_backends("cuda", size)), threads(std::make_unique<RankThreads>(size)) {
    std::vector<Backend*> raw;
    for (auto& b : backends) raw.push_back(b.get());
    comms = make_communicator_group(raw);
  }
  CudaBackend& cuda(int r) { return dynamic_cast<CudaBackend&>(*backends[r]); }
  void run(const std::function<void(int)>& task) {
    threads->run(task, [this](const std::string& why) { comms->abort(why); });
  }
};

TEST(NcclCommunicator, CollectivesMatchTheHostAndReplayFromGraphs) {
  const int gpus = cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus << " visible";
  for (int size = 2; size <= gpus; size *= 2) {
    Group g(size);
    const int n = 1003, rows = 33, cols = 177;
    std::vector<std::vector<uint16_t>> x(size, std::vector<uint16_t>(n));
    std::mt19937 rng(size);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<double> sum(n, 0.0);
    for (int r = 0; r < size; ++r)
      for (int i = 0; i < n; ++i) {
        x[r][i] = float_to_bf16(u(rng));
        sum[i] += bf16_to_float(x[r][i]);
      }
    std::vector<std::vector<float>> reduced(size, std::vector<float>(n));
    std::vector<float> gathered(static_cast<size_t>(size) * rows * cols), gathered_replay(gathered.size());
    std::vector<int64_t> minima(size);
    g.run([&](int r) {
      CudaBackend& b = g.cuda(r);
      Communicator& comm = g.comms->rank(r);
      Buffer xb = b.allocate(n * 2), chunk = b.allocate(rows * cols * 4), all = b.allocate(gathered.size() * 4);
      Tensor xt = xb.view(DType::BF16, {n});
      b.upload(x[r].data(), xt.data, n * 2);
      comm.all_reduce_sum(xt);
      std::vector<uint16_t> back(n);
      b.download(xt.data, back.data(), n * 2);
      for (int i = 0; i < n; ++i) reduced[r][i] = bf16_to_float(back[i]);
      // Gather, captured once and replayed with new chunk contents: the graph must carry the collective.
      std::vector<float> mine(rows * cols);
      for (int i = 0; i < rows * cols; ++i) mine[i] = static_cast<float>(r * 100000 + i);
      b.upload(mine.data(), chunk.data(), mine.size() * 4);
      Tensor ct = chunk.view(DType::F32, {rows, cols}), at = all.view(DType::F32, {size, rows, cols});
      comm.gather_to_first(ct, at);  // eager first: NCCL connects peers on first use, which a capture forbids
      b.synchronize();
      CudaGraph graph = b.capture([&] { comm.gather_to_first(ct, at); });
      b.replay(graph);
      b.synchronize();
      if (r == 0) b.download(at.data, gathered.data(), gathered.size() * 4);
      for (float& v : mine) v = -v;
      b.upload(mine.data(), chunk.data(), mine.size() * 4);
      b.replay(graph);
      b.synchronize();
      if (r == 0) b.download(at.data, gathered_replay.data(), gathered.size() * 4);
      minima[r] = comm.min_over_ranks(1000 + 13 * ((r + 1) % size));
      // For the record: gathering a 256-row logits chunk of Qwen3's vocabulary (the lm_head's per-step transfer).
      const int64_t chunk_cols = (151936 + size - 1) / size;
      Buffer big = b.allocate(256 * chunk_cols * 4), bigall = b.allocate(size * 256 * chunk_cols * 4);
      Tensor bt = big.view(DType::F32, {256, chunk_cols}), ba = bigall.view(DType::F32, {size, 256, chunk_cols});
      comm.gather_to_first(bt, ba);
      b.synchronize();
      CudaGraph gather = b.capture([&] { comm.gather_to_first(bt, ba); });
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < 10; ++k) b.replay(gather);
      b.synchronize();
      if (r == 0)
        std::printf("[nccl] %d GPUs, gather of 256 x %lld F32 logits to rank 0: %.1f us\n", size,
                    static_cast<long long>(chunk_cols),
                    std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 10);
    });
    for (int r = 0; r < size; ++r) {
      for (int i = 0; i < n; ++i)  // bf16 result: 2^-8 relative plus the partial sums' rounding
        ASSERT_NEAR(reduced[r][i], sum[i], 1e-2 * (std::fabs(sum[i]) + 1.0)) << "size " << size << " rank " << r;
      EXPECT_EQ(reduced[r], reduced[0]) << "ranks disagree";
      EXPECT_EQ(minima[r], 1000);
    }
    for (int r = 0; r < size; ++r)
      for (int i = 0; i < rows * cols; ++i) {
        ASSERT_EQ(gathered[static_cast<size_t>(r) * rows * cols + i], static_cast<float>(r * 100000 + i));
        ASSERT_EQ(gathered_replay[static_cast<size_t>(r) * rows * cols + i], -static_cast<float>(r * 100000 + i));
      }
  }
}

// Sizes on both paths: 1003 elements (not whole 16-byte vectors: NCCL), 4096 (one decode row of Qwen3-8B:
// the peer one-shot kernel), 256 x 4096 (a decode batch, peer) and 4096 x 4096 (a prefill step: NCCL). Each is
// captured once in a CUDA graph and replayed 5 times with new inputs (the peer kernel's epochs and staging
// halves advance on the device), and must equal the host's sum on every rank, bit-identically across ranks.
TEST(NcclCommunicator, AllReduceMatchesTheHostOnBothPathsThroughGraphReplays) {
  const int gpus = cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (int size = 2; size <= gpus; size *= 2) {
    Group g(size);
    for (int64_t n : {int64_t{1003}, int64_t{4096}, int64_t{256} * 4096, int64_t{4096} * 4096}) {
      constexpr int kReplays = 5;
      std::mt19937 rng(static_cast<unsigned>(n + size));
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      std::vector<std::vector<std::vector<uint16_t>>> x(kReplays, std::vector<std::vector<uint16_t>>(size));
      for (auto& step : x)
        for (auto& v : step) {
          v.resize(static_cast<size_t>(n));
          for (auto& e : v) e = float_to_bf16(u(rng));
        }
      std::vector<std::vector<std::vector<uint16_t>>> got(kReplays, std::vector<std::vector<uint16_t>>(size));
      g.run([&](int r) {
        CudaBackend& b = g.cuda(r);
        Communicator& comm = g.comms->rank(r);
        Buffer buf = b.allocate(static_cast<size_t>(n) * 2);
        Tensor t = buf.view(DType::BF16, {n});
        b.upload(x[0][r].data(), t.data, t.bytes());
        comm.all_reduce_sum(t);  // eager once (NCCL connects), then from a graph
        b.synchronize();
        CudaGraph graph = b.capture([&] { comm.all_reduce_sum(t); });
        for (int k = 0; k < kReplays; ++k) {
          b.upload(x[k][r].data(), t.data, t.bytes());
          b.replay(graph);
          got[k][r].resize(static_cast<size_t>(n));
          b.download(t.data, got[k][r].data(), t.bytes());
        }
        comm.check_health();
        if (r == 0) {  // for the record: the graph-replayed all-reduce's time at this size
          cudaEvent_t e0, e1;
          cudaEventCreate(&e0);
          cudaEventCreate(&e1);
          cudaEventRecord(e0, b.stream());
          for (int k = 0; k < 20; ++k) b.replay(graph);
          cudaEventRecord(e1, b.stream());
          cudaEventSynchronize(e1);
          float ms = 0;
          cudaEventElapsedTime(&ms, e0, e1);
          std::printf("[nccl] %d GPUs, all-reduce of %lld bf16: %.1f us per call (%s)\n", size,
                      static_cast<long long>(n), ms * 1e3 / 20, g.comms->describe().c_str());
          cudaEventDestroy(e0);
          cudaEventDestroy(e1);
        } else {
          for (int k = 0; k < 20; ++k) b.replay(graph);
          b.synchronize();
        }
      });
      for (int k = 0; k < kReplays; ++k) {
        for (int r = 1; r < size; ++r) ASSERT_EQ(got[k][r], got[k][0]) << "ranks disagree, n " << n;
        for (int64_t i = 0; i < n; ++i) {
          double sum = 0;
          for (int r = 0; r < size; ++r) sum += bf16_to_float(x[k][r][i]);
          ASSERT_NEAR(bf16_to_float(got[k][0][i]), sum, 1e-2 * (std::fabs(sum) + 1.0))
              << "size " << size << " n " << n << " replay " << k << " element " << i;
        }
      }
    }
  }
}

// Rank 1 throws before its all-reduce; the others have enqueued theirs and wait on their streams. They must be
// released within seconds and the error reported must be rank 1's, on both paths: 1003 elements go through
// NCCL (released by ncclCommAbort), 4096 through the peer one-shot kernel (released by its timeout). Each
// path gets a fresh group: a failed group stays failed.
TEST(NcclCommunicator, AFailingRankReleasesRanksWaitingOnTheirStreams) {
  const int gpus = cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (int64_t n : {int64_t{1003}, int64_t{4096}}) {
    Group g(gpus >= 4 ? 4 : 2);
    const auto start = std::chrono::steady_clock::now();
    try {
      g.run([&](int r) {
        if (r == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the others are waiting by now
          throw EngineError("cudaMalloc failed: out of memory");
        }
        Buffer xb = g.cuda(r).allocate(static_cast<size_t>(n) * 2);
        Tensor xt = xb.view(DType::BF16, {n});
        g.comms->rank(r).all_reduce_sum(xt);
        g.cuda(r).synchronize();
      });
      ADD_FAILURE() << "the failure was not reported (n " << n << ")";
    } catch (const EngineError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1: cudaMalloc failed: out of memory"), std::string::npos) << e.what();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[nccl] %lld elements: failing rank reported after %.2f s\n", static_cast<long long>(n), seconds);
    EXPECT_LT(seconds, 10.0) << "n " << n;
  }
}

}  // namespace
}  // namespace nanovllm
