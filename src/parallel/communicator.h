#pragma once
// Collectives among the ranks of one tensor-parallel group: the one interface the model and the runner see.
// Every rank calls the same collectives in the same order from its own thread; data ops are enqueued on the
// rank's backend stream (NCCL on CUDA, so CUDA graphs capture them) or run at once (threads on the CPU).
// Run each kind of collective once outside a capture before capturing it: NCCL connects peers on first use.
#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/tensor.h"

namespace nanovllm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Element-wise sum over the ranks, in place; x is in the backend's compute dtype.
  virtual void all_reduce_sum(Tensor& x) = 0;
  // residual += the sum over ranks of x; out = rms_norm(residual) * weight (x, residual, out [T, H] in the
  // compute dtype; x is left as it was): the all-reduce that closes a row-parallel layer fused with the
  // residual add and RMSNorm after it, where the transport has such a kernel for x's size. Returns false,
  // having done nothing, where it has not; the caller then runs all_reduce_sum and its backend's
  // add_rms_norm, which give the same result.
  virtual bool all_reduce_add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps,
                                       Tensor& out) {
    (void)x, (void)residual, (void)weight, (void)eps, (void)out;
    return false;
  }
  // Rank 0 receives every rank's `chunk` (F32, the same shape on every rank) into `gathered`, rank r's chunk
  // at offset r * chunk.numel(); other ranks leave `gathered` alone (it may be empty there).
  virtual void gather_to_first(const Tensor& chunk, Tensor& gathered) = 0;
  // Blocking: the smallest `value` over the ranks (e.g. the KV blocks every rank has room for).
  virtual int64_t min_over_ranks(int64_t value) = 0;
  // Throws when a collective of this rank is known to have failed without an error of its own (a wait
  // that timed out, or one released by the group's abort); called after every step.
  virtual void check_health() {}

 protected:
  // gather_to_first on rank 0: gathered must hold every rank's chunk.
  void require_room_to_gather(const Tensor& chunk, const Tensor& gathered) const {
    if (gathered.numel() < chunk.numel() * size())
      throw EngineError("gather_to_first: gathered " + gathered.shape_string() + " is smaller than " +
                        std::to_string(size()) + " x " + chunk.shape_string());
  }
};

// The communicators of all ranks, created together. abort() is how a failure on one rank reaches the others:
// ranks waiting in a collective (on the host or on the device) are released and every later collective throws.
class CommunicatorGroup {
 public:
  virtual ~CommunicatorGroup() = default;
  virtual Communicator& rank(int r) = 0;
  // Callable from any thread, any number of times.
  virtual void abort(const std::string& reason) = 0;
  // What carries the collectives, for the startup line ("NCCL 2.28.3, peer one-shot all-reduce for small messages").
  virtual std::string describe() const = 0;
};

}  // namespace nanovllm
