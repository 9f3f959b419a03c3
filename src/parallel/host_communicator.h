#pragma once
// Collectives between the threads of one process over host memory: tensor parallelism on the CPU backend,
// which lets CI check the sharded model against the unsharded one without GPUs. F32 tensors only.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "parallel/communicator.h"

namespace nanovllm {

class HostCommunicatorGroup final : public CommunicatorGroup {
 public:
  explicit HostCommunicatorGroup(int size);
  ~HostCommunicatorGroup() override;

  int size() const { return static_cast<int>(ranks_.size()); }
  Communicator& rank(int r) override;
  void abort(const std::string& reason) override;
  std::string describe() const override { return "host threads"; }

  // Every rank deposits `mine` in its slot, then all wait for each other; throws once the group is aborted.
  void exchange(int rank, const void* mine);
  const void* slot(int rank) const { return slots_[rank]; }
  void wait_all();

 private:
  std::mutex mutex_;
  std::condition_variable arrived_cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string abort_reason_;
  std::vector<const void*> slots_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

}  // namespace nanovllm
