#pragma once
// A one-shot all-reduce for bf16 messages between the GPUs of this process, over peer-to-peer memory
// (NVLink). Decode steps all-reduce a few KB to a few MB twice per layer, a cost that does not shrink with the
// GPU count, so it is latency that matters here.
// Each rank's kernel pushes its input into every peer's inbox (remote stores, which need no round trip) and
// sums its own input and what the peers pushed into its inbox, all local reads, in rank order, so every rank
// holds bit-identical results. There are no flags: an inbox starts out "empty" (every bf16 0xFFFF, a bit
// pattern the senders never send), a reader polls each vector until it has arrived and empties it again
// behind the read (the Lamport-style all-reduce TensorRT-LLM uses). That saves the fence and the flag's trip
// a flag protocol pays per call. Inboxes are double-buffered by call parity: a rank writes a peer's inbox half
// again only two calls later, after it has received that peer's push of the call in between, so after the
// peer's kernel of this call (which emptied the half) has finished. That needs every call to carry at least
// one vector, which fits() requires.
// The fused variant also does the residual add and RMSNorm that follow a row-parallel layer.
// Messages are taken while (ranks - 1) x bytes <= 8 MiB; larger ones (prefill) go to NCCL. A peer that never
// arrives (it failed) releases the waiters after a timeout and marks the rank unhealthy instead of hanging;
// abort() releases them at once.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/tensor.h"

namespace nanovllm {

class PeerAllReduce {
 public:
  static constexpr int kMaxRanks = 8;
  // (ranks - 1) x message bytes this path takes: decode activations (up to 512 rows x 8192 x 2 B on 2 GPUs).
  // Larger messages (prefill) go to NCCL, which moves them at full NVLink bandwidth (32 MiB in 136 us on 2
  // H200s).
  static constexpr size_t kMaxPushedBytes = size_t{8} << 20;
  // What a kernel needs of every rank (kernel argument): rank p's inbox.
  struct Peers {
    void* inbox[kMaxRanks];
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
  // Releases every rank's waiting kernels now and from here on (their results are garbage): the group failed.
  void abort();

 private:
  explicit PeerAllReduce(const std::vector<int>& devices);

  struct DeviceFree {
    int device;
    void operator()(void* p) const;
  };
  struct HostFree {
    void operator()(int* p) const;
  };
  struct StreamDestroy {
    void operator()(cudaStream_t s) const;
  };
  using DeviceMemory = std::unique_ptr<void, DeviceFree>;
  using HostFlag = std::unique_ptr<int, HostFree>;  // pinned, mapped
  static HostFlag mapped_flag(int device, int value);

  struct Rank {
    int device = 0;
    DeviceMemory inbox{nullptr, DeviceFree{0}};    // [2 parities][ranks - 1][slot bytes]: what the peers pushed here
    DeviceMemory calls{nullptr, DeviceFree{0}};    // uint32 [kBlocks]: calls so far, per block of this rank's kernel
    DeviceMemory aborted{nullptr, DeviceFree{0}};  // int: set by abort(), polled by this rank's waiting kernels
    HostFlag timed_out;                            // raised by a kernel whose wait timed out
    std::unique_ptr<CUstream_st, StreamDestroy> abort_stream;  // abort()'s copy, beside the blocked stream
  };
  std::vector<Rank> ranks_;
  HostFlag one_;           // the value abort() copies
  Peers peers_{};          // ranks_' inboxes, as the kernels take them
  size_t slot_bytes_ = 0;  // one peer's message
};

}  // namespace nanovllm
