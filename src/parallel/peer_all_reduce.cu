#include "parallel/peer_all_reduce.h"

#include <cuda_bf16.h>

#include <string>

#include "backend/cuda/rms_norm_row.cuh"
#include "common/error.h"

namespace nanovllm {

namespace {

constexpr int kBlocks = 128;  // fixed, so every block's epoch advances on every call (see the class comment)
constexpr int kThreads = 256;
// (ranks - 1) x message bytes this path takes: decode activations (up to 512 rows x 8192 x 2 B on 2 GPUs).
// Larger messages (prefill) go to NCCL, which moves them at full NVLink bandwidth (32 MiB in 136 us on 2
// H200s).
constexpr size_t kMaxPushedBytes = size_t{8} << 20;
constexpr unsigned long long kTimeoutNs = 5'000'000'000ull;

using Peers = PeerAllReduce::Peers;
constexpr int kMaxRanks = PeerAllReduce::kMaxRanks;

void check(cudaError_t e, const char* what, int device) {
  if (e != cudaSuccess)
    throw EngineError(std::string("peer all-reduce: ") + what + " on GPU " + std::to_string(device) + ": " +
                      cudaGetErrorString(e));
}

__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t next_epoch(uint32_t* epochs) {
  __shared__ uint32_t epoch_shared;
  if (threadIdx.x == 0) epoch_shared = ++epochs[blockIdx.x];  // only this block of this rank touches it
  __syncthreads();
  return epoch_shared;
}

// Inbox half of this call: [ranks][slot] of 16-byte vectors, rank p's message in slot p.
__device__ __forceinline__ int64_t half_offset(uint32_t epoch, int size, int64_t slot_vectors) {
  return (epoch & 1) * size * slot_vectors;
}

// Block b of every rank meets block b of every other rank at `epoch`, after having pushed its part of the
// message: thread p raises this rank's flag in peer p's memory behind the block's stores (release), then
// waits for p's flag here (acquire), after which p's pushed part is visible. A peer that never comes
// releases the block after kTimeoutNs and marks the rank unhealthy.
__device__ void signal_and_wait(const Peers& peers, int rank, int size, uint32_t epoch, int* timed_out) {
  const int b = blockIdx.x;
  __syncthreads();  // every thread's pushes come before the flags (the release below is cumulative over them)
  if (threadIdx.x < size && threadIdx.x != rank) {
    const int p = threadIdx.x;
    store_release(peers.flags[p] + b * kMaxRanks + rank, epoch);
    const uint32_t* arrived = peers.flags[rank] + b * kMaxRanks + p;
    const unsigned long long start = global_ns();
    // Wrap-aware "not yet": a fast peer may already have moved on and raised epoch + 1 here (it cannot get
    // further before this block's next flag), which also releases everything it pushed for `epoch`.
    while (static_cast<int32_t>(load_acquire(arrived) - epoch) < 0) {
      if (global_ns() - start > kTimeoutNs) {
        atomicExch(timed_out, 1);
        break;
      }
    }
  }
  __syncthreads();
}

// fp32 sum of rank p's vector v over the ranks, in rank order (the same rounding on every rank): this
// rank's own from x, the others from the local inbox.
__device__ __forceinline__ void sum_over_ranks(const uint4* x, const uint4* inbox, int64_t slot_vectors, int rank,
                                               int size, int64_t v, float (&acc)[8]) {
  uint4 raw[kMaxRanks];
#pragma unroll
  for (int p = 0; p < kMaxRanks; ++p)
    if (p < size) raw[p] = p == rank ? x[v] : __ldcg(inbox + p * slot_vectors + v);  // .cg: L2, never stale L1
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
#pragma unroll
  for (int p = 0; p < kMaxRanks; ++p) {
    if (p >= size) break;
    float f[8];
    cuda::to_float8(*reinterpret_cast<const cuda::Bf16x8*>(&raw[p]), f);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] += f[j];
  }
}

__device__ __forceinline__ void push(const Peers& peers, int rank, int size, int64_t offset, int64_t slot_vectors,
                                     int64_t v, const uint4& value) {
#pragma unroll
  for (int p = 0; p < kMaxRanks; ++p)
    if (p < size && p != rank) static_cast<uint4*>(peers.inbox[p])[offset + rank * slot_vectors + v] = value;
}

// x (n / 8 vectors) = sum over ranks, in place; block b owns vectors [b * per_block, (b + 1) * per_block).
__global__ void __launch_bounds__(kThreads) one_shot_all_reduce(Peers peers, int rank, int size, __nv_bfloat16* x,
                                                                int64_t vectors, int64_t per_block,
                                                                int64_t slot_vectors, uint32_t* epochs,
                                                                int* timed_out) {
  const uint32_t epoch = next_epoch(epochs);
  const int64_t offset = half_offset(epoch, size, slot_vectors);
  const int64_t begin = blockIdx.x * per_block, end = min(vectors, begin + per_block);
  uint4* xv = reinterpret_cast<uint4*>(x);
  for (int64_t v = begin + threadIdx.x; v < end; v += kThreads) push(peers, rank, size, offset, slot_vectors, v, xv[v]);
  signal_and_wait(peers, rank, size, epoch, timed_out);
  const uint4* inbox = static_cast<const uint4*>(peers.inbox[rank]) + offset;
  for (int64_t v = begin + threadIdx.x; v < end; v += kThreads) {
    float acc[8];
    sum_over_ranks(xv, inbox, slot_vectors, rank, size, v, acc);
    const cuda::Bf16x8 packed = cuda::from_float8(acc);
    xv[v] = *reinterpret_cast<const uint4*>(&packed);
  }
}

// The all-reduce that closes a row-parallel layer, fused with the residual add and RMSNorm after it. Block b
// handles rows b, b + gridDim.x, ...; per row it does one_shot_all_reduce's arithmetic (fp32 sum in rank
// order, rounded to bf16) and then norm.cu's add_rms_norm steps (rms_norm_row.cuh) with its block shape, so
// the result is bit-identical to the two unfused kernels.
template <int kVecs>
__global__ void __launch_bounds__(1024) one_shot_all_reduce_add_rms_norm(
    Peers peers, int rank, int size, const __nv_bfloat16* x, __nv_bfloat16* residual,
    const __nv_bfloat16* __restrict__ weight, float eps, __nv_bfloat16* out, int rows, int hidden,
    int64_t slot_vectors, uint32_t* epochs, int* timed_out) {
  using namespace cuda;
  __shared__ float scratch[32];
  const uint32_t epoch = next_epoch(epochs);
  const int64_t offset = half_offset(epoch, size, slot_vectors);
  const int nvec = hidden / 8;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  for (int row = blockIdx.x; row < rows; row += gridDim.x)
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      const int64_t i = static_cast<int64_t>(row) * nvec + v;
      push(peers, rank, size, offset, slot_vectors, i, xv[i]);
    }
  signal_and_wait(peers, rank, size, epoch, timed_out);
  const uint4* inbox = static_cast<const uint4*>(peers.inbox[rank]) + offset;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = static_cast<int64_t>(row) * hidden;
    const auto reduced = [&](int v, float(&f)[8]) {
      float acc[8];
      sum_over_ranks(xv, inbox, slot_vectors, rank, size, static_cast<int64_t>(row) * nvec + v, acc);
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

PeerAllReduce::PeerAllReduce(const std::vector<int>& devices) {
  const size_t size = devices.size();
  slot_bytes_ = kMaxPushedBytes / (size - 1);
  for (int d : devices) {
    check(cudaSetDevice(d), "cudaSetDevice", d);
    for (int peer : devices) {
      if (peer == d) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
      else check(e, "cudaDeviceEnablePeerAccess", d);
    }
    Rank r;
    r.device = d;
    ranks_.push_back(r);
    Rank& rank = ranks_.back();
    check(cudaMalloc(&rank.inbox, 2 * size * slot_bytes_), "cudaMalloc", d);
    check(cudaMalloc(&rank.flags, kBlocks * kMaxRanks * sizeof(uint32_t)), "cudaMalloc", d);
    check(cudaMalloc(&rank.epochs, kBlocks * sizeof(uint32_t)), "cudaMalloc", d);
    check(cudaMemset(rank.flags, 0, kBlocks * kMaxRanks * sizeof(uint32_t)), "cudaMemset", d);
    check(cudaMemset(rank.epochs, 0, kBlocks * sizeof(uint32_t)), "cudaMemset", d);
    check(cudaHostAlloc(&rank.timed_out_host, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc", d);
    *rank.timed_out_host = 0;
    check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&rank.timed_out_device), rank.timed_out_host, 0),
          "cudaHostGetDevicePointer", d);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", d);
  }
  for (size_t p = 0; p < size; ++p) {
    peers_.inbox[p] = ranks_[p].inbox;
    peers_.flags[p] = ranks_[p].flags;
  }
}

PeerAllReduce::~PeerAllReduce() {
  for (Rank& r : ranks_) {
    cudaSetDevice(r.device);
    cudaFree(r.inbox);
    cudaFree(r.flags);
    cudaFree(r.epochs);
    cudaFreeHost(r.timed_out_host);
  }
}

bool PeerAllReduce::fits(const Tensor& x) const {
  return x.dtype == DType::BF16 && x.numel() % 8 == 0 && x.bytes() <= slot_bytes_ &&
         reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
}

bool PeerAllReduce::fits_fused(const Tensor& x) const {
  return fits(x) && x.ndim == 2 && x.dim(1) % 8 == 0 && x.dim(1) <= cuda::kMaxNormHidden;
}

void PeerAllReduce::all_reduce(int rank, Tensor& x, cudaStream_t stream) {
  const int64_t vectors = x.numel() / 8;
  const int64_t per_block = (vectors + kBlocks - 1) / kBlocks;
  const Rank& r = ranks_[rank];
  one_shot_all_reduce<<<kBlocks, kThreads, 0, stream>>>(peers_, rank, static_cast<int>(ranks_.size()),
                                                         static_cast<__nv_bfloat16*>(x.data), vectors, per_block,
                                                         static_cast<int64_t>(slot_bytes_ / 16), r.epochs,
                                                         r.timed_out_device);
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
  if (cuda::rms_norm_vectors_per_thread(hidden) == 1) {
    one_shot_all_reduce_add_rms_norm<1><<<kBlocks, threads, 0, stream>>>(
        peers_, rank, size, xp, res, w, eps, o, rows, hidden, slot_vectors, r.epochs, r.timed_out_device);
  } else {
    one_shot_all_reduce_add_rms_norm<2><<<kBlocks, threads, 0, stream>>>(
        peers_, rank, size, xp, res, w, eps, o, rows, hidden, slot_vectors, r.epochs, r.timed_out_device);
  }
  check(cudaGetLastError(), "one_shot_all_reduce_add_rms_norm launch", r.device);
}

bool PeerAllReduce::timed_out(int rank) const { return *const_cast<volatile int*>(ranks_[rank].timed_out_host) != 0; }

}  // namespace nanovllm
