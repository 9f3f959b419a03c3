#include "parallel/host_communicator.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace nanovllm {

namespace {

class HostCommunicator final : public Communicator {
 public:
  HostCommunicator(HostCommunicatorGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }

  // Every rank sums all slots in rank order, so all ranks hold bit-identical results.
  void all_reduce_sum(Tensor& x) override {
    require_f32(x, "all_reduce_sum");
    const auto n = static_cast<size_t>(x.numel());
    group_.exchange(rank_, x.data);
    sum_.assign(n, 0.0f);  // kept between calls: no allocation per all-reduce
    for (int r = 0; r < size(); ++r) {
      const float* part = static_cast<const float*>(group_.slot(r));
      for (size_t i = 0; i < n; ++i) sum_[i] += part[i];
    }
    group_.wait_all();  // everyone has read every slot before anyone overwrites its own
    std::memcpy(x.data, sum_.data(), n * sizeof(float));
  }

  void gather_to_first(const Tensor& chunk, Tensor& gathered) override {
    require_f32(chunk, "gather_to_first");
    group_.exchange(rank_, chunk.data);
    if (rank_ == 0) {
      require_room_to_gather(chunk, gathered);
      for (int r = 0; r < size(); ++r)
        std::memcpy(static_cast<char*>(gathered.data) + static_cast<size_t>(r) * chunk.bytes(), group_.slot(r),
                    chunk.bytes());
    }
    group_.wait_all();
  }

  int64_t min_over_ranks(int64_t value) override {
    group_.exchange(rank_, &value);
    int64_t smallest = value;
    for (int r = 0; r < size(); ++r) smallest = std::min(smallest, *static_cast<const int64_t*>(group_.slot(r)));
    group_.wait_all();
    return smallest;
  }

 private:
  static void require_f32(const Tensor& t, const char* op) {
    if (t.dtype != DType::F32) throw EngineError(std::string(op) + ": the host communicator sums F32 only");
  }

  HostCommunicatorGroup& group_;
  int rank_;
  std::vector<float> sum_;  // all_reduce_sum's result before it is copied back
};

}  // namespace

HostCommunicatorGroup::HostCommunicatorGroup(int size) : slots_(size, nullptr) {
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<HostCommunicator>(*this, r));
}

HostCommunicatorGroup::~HostCommunicatorGroup() = default;

Communicator& HostCommunicatorGroup::rank(int r) { return *ranks_.at(r); }

void HostCommunicatorGroup::exchange(int rank, const void* mine) {
  {
    std::lock_guard lock(mutex_);
    slots_[rank] = mine;
  }
  wait_all();
}

void HostCommunicatorGroup::wait_all() {
  std::unique_lock lock(mutex_);
  if (aborted_) throw EngineError("tensor-parallel group aborted: " + abort_reason_);
  const uint64_t generation = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    arrived_cv_.notify_all();
    return;
  }
  arrived_cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  if (generation_ == generation) throw EngineError("tensor-parallel group aborted: " + abort_reason_);
}

void HostCommunicatorGroup::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = reason;
  arrived_cv_.notify_all();
}

}  // namespace nanovllm
