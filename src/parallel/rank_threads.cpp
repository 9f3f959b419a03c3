#include "parallel/rank_threads.h"

#include "common/error.h"

namespace nanovllm {

RankThreads::RankThreads(int size) : size_(size) {
  if (size < 1) throw EngineError("RankThreads: a group needs at least 1 rank, got " + std::to_string(size));
  for (int r = 1; r < size; ++r) threads_.emplace_back([this, r] { worker(r); });
}

RankThreads::~RankThreads() {
  stopping_ = true;
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

// Between decode steps a worker polls for a while before it sleeps: waking a sleeping thread took ~60 us on
// an H200 host, on the critical path of every step (the other ranks wait for the last one in the first
// all-reduce), while a step is a few ms. An engine idle for longer than kSpinFor costs no CPU.
void RankThreads::wait_for_next(uint64_t seen) {
  const auto until = std::chrono::steady_clock::now() + kSpinFor;
  for (int polls = 1; generation_.load() == seen; ++polls) {
    if (polls % 64 == 0) {
      if (std::chrono::steady_clock::now() > until) return generation_.wait(seen);  // futex
      std::this_thread::yield();
    }
  }
}

void RankThreads::worker(int rank) {
  uint64_t seen = 0;
  for (;;) {
    wait_for_next(seen);
    seen = generation_.load();
    if (stopping_) return;
    run_one(rank);
    if (pending_.fetch_sub(1) == 1) pending_.notify_one();
  }
}

void RankThreads::run_one(int rank) {
  try {
    (*task_)(rank);
  } catch (const std::exception& e) {
    bool first = false;
    {
      std::lock_guard lock(failure_mutex_);
      if (!failure_) {
        failure_ = std::current_exception();
        failed_rank_ = rank;
        first = true;
      }
    }
    if (first) (*on_failure_)("rank " + std::to_string(rank) + ": " + e.what());
  }
}

void RankThreads::run(const std::function<void(int)>& task, const std::function<void(const std::string&)>& on_failure) {
  task_ = &task;
  on_failure_ = &on_failure;
  failure_ = nullptr;
  failed_rank_ = -1;
  pending_.store(size_ - 1);
  generation_.fetch_add(1);  // publishes task_ (seq_cst) to the workers
  generation_.notify_all();
  run_one(0);
  for (int left = pending_.load(); left != 0; left = pending_.load()) pending_.wait(left);
  if (!failure_) return;
  const std::string where = "tensor-parallel rank " + std::to_string(failed_rank_) + ": ";
  try {
    std::rethrow_exception(failure_);
  } catch (const InvalidInput& e) {
    throw InvalidInput(where + e.what());
  } catch (const std::exception& e) {
    throw EngineError(where + e.what());
  }
}

}  // namespace nanovllm
