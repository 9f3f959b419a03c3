#pragma once
// Collectives between the GPUs of one machine through NCCL: one communicator per device, all created together
// by this process (ncclCommInitAll), each driven from its rank's own thread on its backend's stream. Small
// bf16 all-reduces (decode) take the peer-to-peer one-shot path instead (PeerAllReduce), unless
// NANOVLLM_PEER_ALL_REDUCE=0.
#include <cuda_runtime.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/peer_all_reduce.h"

namespace nanovllm {

class NcclCommunicatorGroup final : public CommunicatorGroup {
 public:
  // devices[r] and streams[r]: rank r's GPU and the stream its backend enqueues on.
  NcclCommunicatorGroup(const std::vector<int>& devices, const std::vector<cudaStream_t>& streams);
  ~NcclCommunicatorGroup() override;

  Communicator& rank(int r) override;
  void abort(const std::string& reason) override;
  std::string describe() const override;

  // Held shared by every NCCL call and exclusively by abort(), so no call runs on a communicator being
  // torn down; throws once aborted.
  std::shared_lock<std::shared_timed_mutex> enter(const char* op) const;

 private:
  void watch_async_errors(std::stop_token stop);

  mutable std::shared_timed_mutex lock_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex reason_mutex_;  // abort() may run without lock_ (see there)
  std::string abort_reason_;
  std::unique_ptr<PeerAllReduce> peer_;  // small all-reduces; null without peer access
  std::vector<std::unique_ptr<Communicator>> ranks_;
  std::jthread watchdog_;  // last: stopped and joined before the communicators go
};

}  // namespace nanovllm
