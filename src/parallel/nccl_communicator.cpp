#include "parallel/nccl_communicator.h"

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>

#include "common/error.h"

namespace nanovllm {

namespace {

void check_nccl(ncclResult_t result, const char* call, int rank) {
  if (result == ncclSuccess) return;
  throw EngineError(std::string("NCCL ") + call + " failed on rank " + std::to_string(rank) + ": " +
                    ncclGetErrorString(result) + " (" + ncclGetLastError(nullptr) + ")");
}

void check_cuda(cudaError_t result, const char* call, int rank) {
  if (result == cudaSuccess) return;
  throw EngineError(std::string(call) + " failed on rank " + std::to_string(rank) + ": " + cudaGetErrorString(result));
}

ncclDataType_t nccl_type(DType dtype, int rank) {
  switch (dtype) {
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::F32:
      return ncclFloat32;
    case DType::I32:
      return ncclInt32;
    default:
      break;
  }
  throw EngineError("NCCL: no collective for dtype " + std::string(dtype_name(dtype)) + " (rank " +
                    std::to_string(rank) + ")");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclCommunicatorGroup& group, ncclComm_t comm, PeerAllReduce* peer, int rank, int size,
                   int device, cudaStream_t stream)
      : group_(group), comm_(comm), peer_(peer), rank_(rank), size_(size), device_(device), stream_(stream) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice", rank_);
    check_cuda(cudaMalloc(&scratch_, sizeof(int64_t)), "cudaMalloc", rank_);
  }
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    cudaFree(scratch_);
    if (ncclComm_t c = comm_.load()) ncclCommDestroy(c);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Atomic: abort() may run while a rank thread is still inside an NCCL call (see abort()).
  ncclComm_t comm() const { return comm_.load(); }
  void forget_comm() { comm_.store(nullptr); }  // after ncclCommAbort freed it

  void all_reduce_sum(Tensor& x) override {
    auto held = group_.enter("all_reduce_sum");
    check_cuda(cudaSetDevice(device_), "cudaSetDevice", rank_);
    if (peer_ && peer_->fits(x)) return peer_->all_reduce(rank_, x, stream_);
    check_nccl(ncclAllReduce(x.data, x.data, static_cast<size_t>(x.numel()), nccl_type(x.dtype, rank_), ncclSum, comm_,
                             stream_),
               "ncclAllReduce", rank_);
  }

  bool all_reduce_add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps,
                               Tensor& out) override {
    if (!peer_ || !peer_->fits_fused(x)) return false;
    if (residual.dtype != x.dtype || out.dtype != x.dtype || weight.dtype != x.dtype || residual.ndim != 2 ||
        residual.dim(0) != x.dim(0) || residual.dim(1) != x.dim(1) || out.numel() != x.numel() ||
        weight.numel() != x.dim(1))
      throw EngineError("all_reduce_add_rms_norm: x " + x.shape_string() + ", residual " + residual.shape_string() +
                        ", weight " + weight.shape_string() + " and out " + out.shape_string() + " do not match");
    auto held = group_.enter("all_reduce_add_rms_norm");
    check_cuda(cudaSetDevice(device_), "cudaSetDevice", rank_);
    peer_->all_reduce_add_rms_norm(rank_, x, residual, weight, eps, out, stream_);
    return true;
  }

  // Point-to-point in one group: rank 0 receives from everyone (itself included), the others send once.
  void gather_to_first(const Tensor& chunk, Tensor& gathered) override {
    auto held = group_.enter("gather_to_first");
    check_cuda(cudaSetDevice(device_), "cudaSetDevice", rank_);
    const auto count = static_cast<size_t>(chunk.numel());
    const ncclDataType_t type = nccl_type(chunk.dtype, rank_);
    if (rank_ == 0) require_room_to_gather(chunk, gathered);
    check_nccl(ncclGroupStart(), "ncclGroupStart", rank_);
    if (rank_ == 0) {
      for (int r = 0; r < size_; ++r)
        check_nccl(ncclRecv(static_cast<char*>(gathered.data) + r * chunk.bytes(), count, type, r, comm_, stream_),
                   "ncclRecv", rank_);
    }
    check_nccl(ncclSend(chunk.data, count, type, 0, comm_, stream_), "ncclSend", rank_);
    check_nccl(ncclGroupEnd(), "ncclGroupEnd (gather_to_first)", rank_);
  }

  void check_health() override {
    (void)group_.enter("check_health");  // throws once aborted: a released peer all-reduce left garbage
    if (peer_ && peer_->timed_out(rank_))
      throw EngineError("rank " + std::to_string(rank_) + ": a peer all-reduce timed out waiting for the other ranks");
  }

  int64_t min_over_ranks(int64_t value) override {
    auto held = group_.enter("min_over_ranks");
    check_cuda(cudaSetDevice(device_), "cudaSetDevice", rank_);
    check_cuda(cudaMemcpyAsync(scratch_, &value, sizeof value, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync",
               rank_);
    check_nccl(ncclAllReduce(scratch_, scratch_, 1, ncclInt64, ncclMin, comm_, stream_), "ncclAllReduce", rank_);
    // The wait may be long (the others may still be loading) and abort() must get through meanwhile, so it
    // happens unlocked; the copy back (into pageable memory, which waits too) only once it is over.
    held.unlock();
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", rank_);
    held = group_.enter("min_over_ranks");  // throws when the wait ended because the group was aborted
    int64_t smallest = 0;
    check_cuda(cudaMemcpyAsync(&smallest, scratch_, sizeof smallest, cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync", rank_);
    return smallest;
  }

 private:
  const NcclCommunicatorGroup& group_;
  std::atomic<ncclComm_t> comm_;
  PeerAllReduce* peer_;
  int rank_, size_, device_;
  cudaStream_t stream_;
  void* scratch_ = nullptr;
};

}  // namespace

NcclCommunicatorGroup::NcclCommunicatorGroup(const std::vector<int>& devices,
                                             const std::vector<cudaStream_t>& streams) {
  // NVLink multicast (NVLS) can take shared GPUs out of service when a program misuses it, and our collectives
  // are small: keep it off unless the user turned it on explicitly (setenv does not overwrite).
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  const int n = static_cast<int>(devices.size());
  if (n < 1 || streams.size() != devices.size()) throw EngineError("NcclCommunicatorGroup: one stream per device");
  const char* peer_setting = std::getenv("NANOVLLM_PEER_ALL_REDUCE");  // "0": NCCL only (for comparisons)
  if (!(peer_setting && std::string(peer_setting) == "0")) peer_ = PeerAllReduce::create(devices);  // owns itself
  std::vector<ncclComm_t> comms(n);
  const ncclResult_t init = ncclCommInitAll(comms.data(), n, devices.data());
  if (init != ncclSuccess)
    throw EngineError(std::string("NCCL ncclCommInitAll over ") + std::to_string(n) +
                      " GPUs failed: " + ncclGetErrorString(init) + " (" + ncclGetLastError(nullptr) + ")");
  // From here each communicator is owned by its rank object; one that could not be built frees its own.
  for (int r = 0; r < n; ++r) {
    try {
      ranks_.push_back(std::make_unique<NcclCommunicator>(*this, comms[r], peer_.get(), r, n, devices[r], streams[r]));
    } catch (...) {
      for (int rest = r; rest < n; ++rest) ncclCommDestroy(comms[rest]);
      throw;
    }
  }
  watchdog_ = std::jthread([this](std::stop_token stop) { watch_async_errors(stop); });
}

NcclCommunicatorGroup::~NcclCommunicatorGroup() {
  watchdog_.request_stop();
  if (watchdog_.joinable()) watchdog_.join();
  // ncclCommDestroy finalises (flushes) its communicator, which may wait for the peers: destroy all at once.
  {
    std::vector<std::jthread> destroyers;
    for (auto& rank : ranks_) destroyers.emplace_back([&rank] { rank.reset(); });
  }
  peer_.reset();
}

Communicator& NcclCommunicatorGroup::rank(int r) { return *ranks_.at(r); }

std::string NcclCommunicatorGroup::describe() const {
  int version = 0;
  ncclGetVersion(&version);
  const std::string nccl = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                           std::to_string(version % 100);
  return peer_ ? nccl + ", peer one-shot all-reduce for small messages" : nccl;
}

std::shared_lock<std::shared_timed_mutex> NcclCommunicatorGroup::enter(const char* op) const {
  std::shared_lock held(lock_);
  if (aborted_) {
    std::lock_guard reason(reason_mutex_);
    throw EngineError(std::string(op) + ": tensor-parallel group aborted: " + abort_reason_);
  }
  return held;
}

// ncclCommAbort makes NCCL kernels that wait for a peer return, so ranks blocked on their stream get free.
// NCCL calls only enqueue (they do not wait for peers on the host), so the exclusive lock comes quickly; if it
// does not within a second, abort anyway rather than hang.
// The group is marked aborted before anything is released, so a rank whose wait ends because of the abort
// finds it so in check_health().
void NcclCommunicatorGroup::abort(const std::string& reason) {
  {
    std::lock_guard guard(reason_mutex_);
    if (aborted_) return;
    abort_reason_ = reason;
    aborted_ = true;
  }
  if (peer_) peer_->abort();  // its kernels wait on no lock: release them first
  std::unique_lock held(lock_, std::defer_lock);
  (void)held.try_lock_for(std::chrono::seconds(1));  // held or not, go on (see above)
  for (auto& rank : ranks_) {
    auto& comm = static_cast<NcclCommunicator&>(*rank);
    if (comm.comm()) ncclCommAbort(comm.comm());
    comm.forget_comm();
  }
}

// NCCL reports transport failures asynchronously; nobody would see them while ranks wait on their streams.
void NcclCommunicatorGroup::watch_async_errors(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::string failure;
    {
      std::shared_lock held(lock_);
      if (aborted_) return;
      for (auto& rank : ranks_) {
        ncclResult_t async = ncclSuccess;
        const auto& comm = static_cast<NcclCommunicator&>(*rank);
        if (ncclCommGetAsyncError(comm.comm(), &async) == ncclSuccess && async != ncclSuccess) {
          failure = "NCCL error on rank " + std::to_string(rank->rank()) + ": " + ncclGetErrorString(async);
          break;
        }
      }
    }
    if (!failure.empty()) return abort(failure);
  }
}

}  // namespace nanovllm
