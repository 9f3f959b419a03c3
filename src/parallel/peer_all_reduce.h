#pragma once
// A one-shot all-reduce for bf16 messages between the GPUs of this process, over peer-to-peer memory
// (NVLink). Decode steps all-reduce a few KB to a few MB twice per layer, a cost that does not shrink with the
// GPU count, so it is latency that matters here.
// Each rank's kernel pushes its input into every peer's inbox (remote stores, which need no round trip),
// raises a flag in every peer's memory behind them (release), waits for the peers' flags (acquire) and sums
// its own input and the inboxes, all local reads, in rank order, so every rank holds bit-identical results.
// Inboxes are double-buffered by call parity: a rank writes a peer's inbox half again only two calls later,
// after that peer has arrived at the call in between, so it has finished reading it.
// The fused variant also does the residual add and RMSNorm that follow a row-parallel layer.
// Messages are taken while (ranks - 1) x bytes <= 8 MiB; larger ones (prefill) go to NCCL. A peer that never
// arrives (it failed) releases the waiters after a timeout and marks the rank unhealthy instead of hanging.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/tensor.h"

namespace nanovllm {

class PeerAllReduce {
 public:
  static constexpr int kMaxRanks = 8;
  // What a kernel needs of every rank (kernel argument): rank p's inbox and flags.
  struct Peers {
    void* inbox[kMaxRanks];
    uint32_t* flags[kMaxRanks];
  };

  // Null when some pair of devices cannot access each other's memory.
  static std::unique_ptr<PeerAllReduce> create(const std::vector<int>& devices);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  // Whether x takes this path (BF16, whole 16-byte vectors, small enough that one-shot beats NCCL).
  bool fits(const Tensor& x) const;
  // In place: x = sum over ranks of x.
  void all_reduce(int rank, Tensor& x, cudaStream_t stream);
  // Whether x [T, H] can take all_reduce_add_rms_norm: fits(x), and H a multiple of 8 up to 16384.
  bool fits_fused(const Tensor& x) const;
  // residual += sum over ranks of x; out = rms_norm(residual) * weight. Bit-identical to all_reduce()
  // followed by the CUDA backend's add_rms_norm; x is left as it was.
  void all_reduce_add_rms_norm(int rank, const Tensor& x, Tensor& residual, const Tensor& weight, float eps,
                               Tensor& out, cudaStream_t stream);
  // True once a wait on rank's side timed out (its step's result is garbage).
  bool timed_out(int rank) const;

 private:
  explicit PeerAllReduce(const std::vector<int>& devices);

  struct Rank {
    int device = 0;
    void* inbox = nullptr;          // [2 parities][ranks][slot bytes]: what each peer pushed here
    uint32_t* flags = nullptr;      // [kBlocks][kMaxRanks]: epoch each peer reached
    uint32_t* epochs = nullptr;     // [kBlocks]: calls so far, per block of this rank's kernel
    int* timed_out_host = nullptr;  // mapped pinned memory
    int* timed_out_device = nullptr;
  };
  std::vector<Rank> ranks_;
  Peers peers_{};          // ranks_' inboxes and flags, as the kernels take them
  size_t slot_bytes_ = 0;  // one peer's message
};

}  // namespace nanovllm
