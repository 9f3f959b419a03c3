#pragma once
// The control channel of a tensor-parallel group: one thread per rank, each bound to its rank for life.
// Why threads and not nano-vLLM's worker processes: C++ has no interpreter lock, so a thread per GPU runs as
// freely as a process would, one process can create every NCCL communicator at once (ncclCommInitAll), a
// step's batch needs no serialising (ranks read the scheduler's sequences directly while the engine waits),
// and shutting down leaves no processes or shared-memory segments behind.
// Rank 0 runs on the calling thread: it samples, so its results need no hand-over, and a step costs one
// wake-up of the other ranks only.
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nanovllm {

class RankThreads {
 public:
  explicit RankThreads(int size);
  ~RankThreads();  // stops and joins every thread
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // Runs task(r) for every rank r at once and returns when all have returned. When a rank throws,
  // on_failure(message) is called at once from that rank's thread (to release ranks waiting for it in a
  // collective); once all have returned, the first failure is rethrown with its rank named (InvalidInput
  // stays InvalidInput, anything else becomes EngineError).
  void run(const std::function<void(int rank)>& task, const std::function<void(const std::string&)>& on_failure);

 private:
  static constexpr std::chrono::milliseconds kSpinFor{50};  // longer than a decode step

  void worker(int rank);
  void wait_for_next(uint64_t seen);
  void run_one(int rank);

  int size_;
  const std::function<void(int)>* task_ = nullptr;
  const std::function<void(const std::string&)>* on_failure_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped to start a task (or to stop)
  std::atomic<int> pending_{0};          // worker ranks still running the current task
  bool stopping_ = false;

  std::mutex failure_mutex_;
  int failed_rank_ = -1;
  std::exception_ptr failure_;

  std::vector<std::thread> threads_;
};

}  // namespace nanovllm
