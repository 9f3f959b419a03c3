#include "parallel/peer_all_reduce.h"

#include <cuda_bf16.h>

#include <string>

#include "backend/cuda/rms_norm_row.cuh"
#include "common/error.h"

namespace nanovllm {

namespace {

// Every kernel launches all kBlocks blocks and each bumps its own call count, so the counts, and with them the
// inbox half a call uses, stay equal across blocks and kernels. A block waits only for the same block of the
// peers, so blocks need not all be resident for progress; they are for speed: 256 blocks of up to 512 threads
// fit at once on an H100 / H200 (132 SMs, 2 such blocks each). Blocks of more threads (hidden > 4096) fit
// once per SM, so then only the first kBlocks / 2 take rows.
constexpr int kBlocks = 256;
constexpr int kThreads = 256;
constexpr unsigned long long kTimeoutNs = 5'000'000'000ull;
constexpr int kSpinsPerCheck = 256;  // polls of the inbox between looks at the clock and the abort flag

using Peers = PeerAllReduce::Peers;
constexpr int kMaxRanks = PeerAllReduce::kMaxRanks;

void check(cudaError_t e, const char* what, int device) {
  if (e != cudaSuccess)
    throw EngineError(std::string("peer all-reduce: ") + what + " on GPU " + std::to_string(device) + ": " +
                      cudaGetErrorString(e));
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// An inbox vector nobody has written yet: every bf16 0xFFFF, a NaN bit pattern that outgoing data never
// carries (without_empty maps it to the canonical NaN 0x7FC0, so sums come out the same).
constexpr uint32_t kEmptyWord = 0xFFFFFFFFu;
__device__ __forceinline__ uint32_t word_without_empty(uint32_t w) {
  if ((w & 0xFFFFu) == 0xFFFFu) w = (w & 0xFFFF0000u) | 0x7FC0u;
  if ((w >> 16) == 0xFFFFu) w = (w & 0xFFFFu) | 0x7FC00000u;
  return w;
}
__device__ __forceinline__ uint4 without_empty(uint4 v) {
  return {word_without_empty(v.x), word_without_empty(v.y), word_without_empty(v.z), word_without_empty(v.w)};
}
// Whether some bf16 of v has not arrived (stores may land in pieces; each bf16 lands whole).
__device__ __forceinline__ bool word_has_empty(uint32_t w) { return (w & 0xFFFFu) == 0xFFFFu || (w >> 16) == 0xFFFFu; }
__device__ __forceinline__ bool has_empty(const uint4& v) {
  return word_has_empty(v.x) || word_has_empty(v.y) || word_has_empty(v.z) || word_has_empty(v.w);
}

__device__ __forceinline__ uint32_t next_call(uint32_t* calls) {
  __shared__ uint32_t call_shared;
  if (threadIdx.x == 0) call_shared = ++calls[blockIdx.x];  // only this block of this rank touches it
  __syncthreads();
  return call_shared;
}
// Inbox half of this call: [ranks - 1][slot] of 16-byte vectors. Rank r's message sits in peer p's inbox at
// slot r, or r - 1 past p's own rank (a rank sends itself nothing).
__device__ __forceinline__ int64_t half_offset(uint32_t call, int size, int64_t slot_vectors) {
  return (call & 1) * (size - 1) * slot_vectors;
}
__device__ __forceinline__ int slot_of(int sender, int receiver) { return sender < receiver ? sender : sender - 1; }

__device__ __forceinline__ void push(const Peers& peers, int rank, int size, int64_t half, int64_t slot_vectors,
                                     int64_t v, const uint4& value) {
#pragma unroll
  for (int p = 0; p < kMaxRanks; ++p)
    if (p < size && p != rank) static_cast<uint4*>(peers.inbox[p])[half + slot_of(rank, p) * slot_vectors + v] = value;
}

// What a waiting thread needs besides the inbox: when it started, where to raise the alarm (mapped host
// memory), this rank's abort flag (device memory: thousands of threads poll it, which host memory over PCIe
// could not take), and whether it has given up already (then it waits for nothing more in this call).
struct Waiter {
  unsigned long long start;
  int* timed_out;
  const volatile int* aborted;
  bool released = false;
};

// Rank p's vector v for every peer p, from this rank's inbox half, once each has fully arrived; the slots
// are emptied behind the reads (the peer writes this half again two calls later, after this rank's next call
// has pushed, so after this kernel has finished). A peer that never comes (it failed) or an abort of the
// group releases the thread with garbage and, for a timeout, marks the rank unhealthy.
__device__ __forceinline__ void receive(uint4* inbox_half, int64_t slot_vectors, int rank, int size, int64_t v,
                                        Waiter& w, uint4 (&raw)[kMaxRanks]) {
#pragma unroll
  for (int p = 0; p < kMaxRanks; ++p)
    if (p < size && p != rank) raw[p] = __ldcv(inbox_half + slot_of(p, rank) * slot_vectors + v);
#pragma unroll
  for (int p = 0; p < kMaxRanks; ++p) {
    if (p >= size || p == rank) continue;
    uint4* slot = inbox_half + slot_of(p, rank) * slot_vectors + v;
    for (int spins = 1; !w.released && has_empty(raw[p]); ++spins) {
      if (spins % kSpinsPerCheck == 0) {
        if (*w.aborted) w.released = true;
        else if (global_ns() - w.start > kTimeoutNs) {
          atomicExch(w.timed_out, 1);
          w.released = true;
        }
        if (w.released) break;
      }
      __nanosleep(32);  // gentler on L2, through which the peer's stores arrive
      raw[p] = __ldcv(slot);
    }
    __stcg(slot, uint4{kEmptyWord, kEmptyWord, kEmptyWord, kEmptyWord});
  }
}

// fp32 sum of vector v over the ranks, in rank order (the same rounding on every rank): this rank's own
// (as it was sent), the others from receive().
__device__ __forceinline__ void sum_over_ranks(const uint4& own, const uint4 (&raw)[kMaxRanks], int rank, int size,
                                               float (&acc)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
#pragma unroll
  for (int p = 0; p < kMaxRanks; ++p) {
    if (p >= size) break;
    const uint4 v = p == rank ? own : raw[p];  // p known at compile time: raw stays in registers
    float f[8];
    cuda::to_float8(*reinterpret_cast<const cuda::Bf16x8*>(&v), f);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] += f[j];
  }
}

// x (n / 8 vectors) = sum over ranks, in place; block b owns vectors [b * per_block, (b + 1) * per_block).
__global__ void __launch_bounds__(kThreads)
    one_shot_all_reduce(Peers peers, uint4* own_inbox, int rank, int size, __nv_bfloat16* x, int64_t vectors,
                        int64_t per_block, int64_t slot_vectors, uint32_t* calls, int* timed_out, const int* aborted) {
  Waiter w{global_ns(), timed_out, aborted};
  const int64_t half = half_offset(next_call(calls), size, slot_vectors);
  const int64_t begin = blockIdx.x * per_block, end = min(vectors, begin + per_block);
  uint4* xv = reinterpret_cast<uint4*>(x);
  for (int64_t v = begin + threadIdx.x; v < end; v += kThreads)
    push(peers, rank, size, half, slot_vectors, v, without_empty(xv[v]));
  uint4* inbox = own_inbox + half;  // peers.inbox[rank], without indexing the parameter at run time
  for (int64_t v = begin + threadIdx.x; v < end; v += kThreads) {
    uint4 raw[kMaxRanks];
    receive(inbox, slot_vectors, rank, size, v, w, raw);
    float acc[8];
    sum_over_ranks(without_empty(xv[v]), raw, rank, size, acc);
    const cuda::Bf16x8 packed = cuda::from_float8(acc);
    xv[v] = *reinterpret_cast<const uint4*>(&packed);
  }
}

// The all-reduce that closes a row-parallel layer, fused with the residual add and RMSNorm after it. Block b
// < row_blocks handles rows b, b + row_blocks, ...; per row it does one_shot_all_reduce's arithmetic (fp32 sum in rank
// order, rounded to bf16) and then norm.cu's add_rms_norm steps (rms_norm_row.cuh) with its block shape, so
// the result is bit-identical to the two unfused kernels.
template <int kVecs>
__global__ void __launch_bounds__(1024)
    one_shot_all_reduce_add_rms_norm(Peers peers, uint4* own_inbox, int rank, int size, const __nv_bfloat16* x,
                                     __nv_bfloat16* residual, const __nv_bfloat16* __restrict__ weight, float eps,
                                     __nv_bfloat16* out, int rows, int hidden, int row_blocks, int64_t slot_vectors,
                                     uint32_t* calls, int* timed_out, const int* aborted) {
  using namespace cuda;
  __shared__ float scratch[32];
  Waiter w{global_ns(), timed_out, aborted};
  const int64_t half = half_offset(next_call(calls), size, slot_vectors);
  if (static_cast<int>(blockIdx.x) >= row_blocks) return;  // counted the call; rows belong to the others
  const int nvec = hidden / 8;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  for (int row = blockIdx.x; row < rows; row += row_blocks)
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      const int64_t i = static_cast<int64_t>(row) * nvec + v;
      push(peers, rank, size, half, slot_vectors, i, without_empty(xv[i]));
    }
  uint4* inbox = own_inbox + half;  // peers.inbox[rank], without indexing the parameter at run time
  for (int row = blockIdx.x; row < rows; row += row_blocks) {
    const int64_t base = static_cast<int64_t>(row) * hidden;
    const auto reduced = [&](int v, float(&f)[8]) {
      const int64_t i = static_cast<int64_t>(row) * nvec + v;
      uint4 raw[kMaxRanks];
      receive(inbox, slot_vectors, rank, size, i, w, raw);
      float acc[8];
      sum_over_ranks(without_empty(xv[i]), raw, rank, size, acc);
      to_float8(from_float8(acc), f);  // the all-reduce's bf16 result
    };
    rms_norm_row<kVecs, true>(reduced, residual + base, weight, eps, hidden, out + base, scratch);
  }
}

}  // namespace

std::unique_ptr<PeerAllReduce> PeerAllReduce::create(const std::vector<int>& devices) {
  if (devices.size() < 2 || devices.size() > kMaxRanks) return nullptr;
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int ok = 0;
      if (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || !ok) return nullptr;
    }
  return std::unique_ptr<PeerAllReduce>(new PeerAllReduce(devices));
}

void PeerAllReduce::DeviceFree::operator()(void* p) const {
  cudaSetDevice(device);
  cudaFree(p);
}
void PeerAllReduce::HostFree::operator()(int* p) const { cudaFreeHost(p); }
void PeerAllReduce::StreamDestroy::operator()(cudaStream_t s) const { cudaStreamDestroy(s); }

PeerAllReduce::HostFlag PeerAllReduce::mapped_flag(int device, int value) {
  int* p = nullptr;
  check(cudaHostAlloc(&p, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc", device);
  HostFlag flag(p);
  *p = value;
  return flag;
}

PeerAllReduce::PeerAllReduce(const std::vector<int>& devices) {
  const size_t size = devices.size();
  slot_bytes_ = kMaxPushedBytes / (size - 1);
  const size_t inbox_bytes = 2 * (size - 1) * slot_bytes_;
  one_ = mapped_flag(devices[0], 1);
  for (int d : devices) {
    check(cudaSetDevice(d), "cudaSetDevice", d);
    for (int peer : devices) {
      if (peer == d) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
      else check(e, "cudaDeviceEnablePeerAccess", d);
    }
    Rank& rank = ranks_.emplace_back();
    rank.device = d;
    auto device_alloc = [&](size_t bytes) {
      void* p = nullptr;
      check(cudaMalloc(&p, bytes), "cudaMalloc", d);
      return DeviceMemory(p, DeviceFree{d});
    };
    rank.inbox = device_alloc(inbox_bytes);
    rank.calls = device_alloc(kBlocks * sizeof(uint32_t));
    rank.aborted = device_alloc(sizeof(int));
    check(cudaMemset(rank.inbox.get(), 0xFF, inbox_bytes), "cudaMemset", d);  // every bf16 0xFFFF: empty
    check(cudaMemset(rank.calls.get(), 0, kBlocks * sizeof(uint32_t)), "cudaMemset", d);
    check(cudaMemset(rank.aborted.get(), 0, sizeof(int)), "cudaMemset", d);
    rank.timed_out = mapped_flag(d, 0);
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", d);
    rank.abort_stream.reset(stream);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", d);
  }
  for (size_t p = 0; p < size; ++p) peers_.inbox[p] = ranks_[p].inbox.get();
}

PeerAllReduce::~PeerAllReduce() = default;

// A copy-engine write of 1 into every rank's flag, on a stream of its own: it lands while the rank's stream is
// stuck in a waiting kernel. Errors are ignored (a failed GPU may refuse; the others still get theirs), and
// the calling thread keeps its current device.
void PeerAllReduce::abort() {
  int current = 0;
  cudaGetDevice(&current);
  for (Rank& r : ranks_) {
    cudaSetDevice(r.device);
    cudaMemcpyAsync(r.aborted.get(), one_.get(), sizeof(int), cudaMemcpyHostToDevice, r.abort_stream.get());
  }
  cudaGetLastError();
  cudaSetDevice(current);
}

bool PeerAllReduce::fits(const Tensor& x) const {
  // Not empty: the double buffering needs every call to carry something (see the class comment).
  return x.dtype == DType::BF16 && x.numel() > 0 && x.numel() % 8 == 0 && x.bytes() <= slot_bytes_ &&
         reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
}

bool PeerAllReduce::fits_fused(const Tensor& x) const {
  return fits(x) && x.ndim == 2 && x.dim(1) % 8 == 0 && x.dim(1) <= cuda::kMaxNormHidden;
}

void PeerAllReduce::all_reduce(int rank, Tensor& x, cudaStream_t stream) {
  const int64_t vectors = x.numel() / 8;
  const int64_t per_block = (vectors + kBlocks - 1) / kBlocks;
  const Rank& r = ranks_[rank];
  one_shot_all_reduce<<<kBlocks, kThreads, 0, stream>>>(
      peers_, static_cast<uint4*>(r.inbox.get()), rank, static_cast<int>(ranks_.size()),
      static_cast<__nv_bfloat16*>(x.data), vectors, per_block, static_cast<int64_t>(slot_bytes_ / 16),
      static_cast<uint32_t*>(r.calls.get()), r.timed_out.get(), static_cast<const int*>(r.aborted.get()));
  check(cudaGetLastError(), "one_shot_all_reduce launch", r.device);
}

void PeerAllReduce::all_reduce_add_rms_norm(int rank, const Tensor& x, Tensor& residual, const Tensor& weight,
                                            float eps, Tensor& out, cudaStream_t stream) {
  const int rows = static_cast<int>(x.dim(0)), hidden = static_cast<int>(x.dim(1));
  const int threads = cuda::rms_norm_threads(hidden);  // norm.cu's block shape: the same reduction, the same bits
  const Rank& r = ranks_[rank];
  const int size = static_cast<int>(ranks_.size());
  const auto* xp = static_cast<const __nv_bfloat16*>(x.data);
  auto* res = static_cast<__nv_bfloat16*>(residual.data);
  const auto* w = static_cast<const __nv_bfloat16*>(weight.data);
  auto* o = static_cast<__nv_bfloat16*>(out.data);
  const auto slot_vectors = static_cast<int64_t>(slot_bytes_ / 16);
  auto* calls = static_cast<uint32_t*>(r.calls.get());
  auto* inbox = static_cast<uint4*>(r.inbox.get());
  const auto* aborted = static_cast<const int*>(r.aborted.get());
  const int row_blocks = threads <= 512 ? kBlocks : kBlocks / 2;
  if (cuda::rms_norm_vectors_per_thread(hidden) == 1) {
    one_shot_all_reduce_add_rms_norm<1><<<kBlocks, threads, 0, stream>>>(peers_, inbox, rank, size, xp, res, w, eps, o,
                                                                         rows, hidden, row_blocks, slot_vectors, calls,
                                                                         r.timed_out.get(), aborted);
  } else {
    one_shot_all_reduce_add_rms_norm<2><<<kBlocks, threads, 0, stream>>>(peers_, inbox, rank, size, xp, res, w, eps, o,
                                                                         rows, hidden, row_blocks, slot_vectors, calls,
                                                                         r.timed_out.get(), aborted);
  }
  check(cudaGetLastError(), "one_shot_all_reduce_add_rms_norm launch", r.device);
}

bool PeerAllReduce::timed_out(int rank) const { return *const_cast<volatile int*>(ranks_[rank].timed_out.get()) != 0; }

}  // namespace nanovllm
