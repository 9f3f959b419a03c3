// bench_attention: decode attention time against the memory floor (bytes of K+V read / measured copy
// bandwidth) and prefill attention TFLOP/s. Not a test; prints one table. Usage: bench_attention [reps]
// [prefill | decode] (those rows alone). Decode rows name the key loop (cores / mma; * = the one kAuto runs).
// Decode columns: "us/call" is one call between two events (host launch latency included), "us queued" the
// mean of 16 calls queued back to back (what a CUDA graph sees); GB/s and % of copy use the queued time.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/attention.h"
#include "prefill_kernels.h"

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "bench_attention: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { check(cudaMalloc(&ptr, std::max<size_t>(bytes, 16)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

__global__ void fill_random_bf16(__nv_bfloat16* p, size_t n, uint32_t seed, float amplitude) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 0x9e3779b9u ^ seed ^ static_cast<uint32_t>(i >> 32) * 0x85ebca6bu;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    const float u = static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
    p[i] = __float2bfloat16(u * amplitude);
  }
}

// Random FP8 codes of either sign with |value| < 2 (never the NaN code).
__global__ void fill_random_fp8(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 0x9e3779b9u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    p[i] = static_cast<uint8_t>(x & 0xb7u);  // exponent field at most 0b0110 (|value| < 2): finite, never NaN
  }
}

void fill(const DeviceBuffer& b, size_t elems, uint32_t seed, float amplitude) {
  fill_random_bf16<<<1024, 256>>>(b.as<__nv_bfloat16>(), elems, seed, amplitude);
  check(cudaGetLastError(), "fill_random_bf16");
}

template <class T>
void upload(const DeviceBuffer& b, const std::vector<T>& v) {
  check(cudaMemcpy(b.ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
}

int sm_count() {
  int count = 0;
  check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0), "multiprocessor count");
  return count;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `fn(rep)` once per rep with events; returns the median in microseconds.
template <class Fn>
double time_us(int reps, Fn fn) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < 3; ++i) fn(i);  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(start), "record");
    fn(i);
    check(cudaEventRecord(stop), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    t.push_back(ms * 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(t);
}

// Device-to-device copy of 1 GiB: bytes read + bytes written per second.
double copy_bandwidth_gbs(int reps) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer src(bytes), dst(bytes);
  fill(src, bytes / 2, 1, 1.f);
  const double us =
      time_us(reps, [&](int) { check(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice), "memcpy"); });
  return 2.0 * bytes / (us * 1e-6) / 1e9;
}

struct Shape {
  const char* name;
  int num_heads, num_kv_heads, head_dim, block_size;
};

// The cache's element size: bf16, or FP8 codes.
size_t cache_elem_bytes(bool fp8) { return fp8 ? 1 : 2; }

void fill_cache(const DeviceBuffer& b, size_t elems, uint32_t seed, float amplitude, bool fp8) {
  if (!fp8) return fill(b, elems, seed, amplitude);
  fill_random_fp8<<<1024, 256>>>(b.as<uint8_t>(), elems, seed);
  check(cudaGetLastError(), "fill_random_fp8");
}

nanovllm::cuda::PagedAttentionArgs make_args(const Shape& s, int batch, int q_len, int ctx, const DeviceBuffer& q,
                                             const DeviceBuffer& k, const DeviceBuffer& v, const DeviceBuffer& cu,
                                             const DeviceBuffer& lens, const DeviceBuffer& out, bool fp8) {
  nanovllm::cuda::PagedAttentionArgs a;
  a.q = q.as<__nv_bfloat16>();
  a.k_cache = k.ptr;
  a.v_cache = v.ptr;
  a.fp8_cache = fp8;
  a.k_scale = fp8 ? 0.5f : 1.0f;
  a.v_scale = fp8 ? 0.25f : 1.0f;
  a.cu_seqlens_q = cu.as<int>();
  a.seq_lens_k = lens.as<int>();
  a.out = out.as<__nv_bfloat16>();
  a.num_seqs = batch;
  a.max_seqlen_q = q_len;
  a.max_seqlen_k = ctx;
  a.max_blocks_per_seq = (ctx + s.block_size - 1) / s.block_size;
  a.block_size = s.block_size;
  a.num_heads = s.num_heads;
  a.num_kv_heads = s.num_kv_heads;
  a.head_dim = s.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return a;
}

// Decode over sequences of the given lengths, with max_seqlen_k = `bound` (a decode graph is captured
// for max_model_len, whatever the step's real lengths).
void bench_decode_lens(const Shape& s, const std::vector<int>& lens, int bound, const char* label, double copy_gbs,
                       int reps, bool fp8 = false) {
  const int batch = static_cast<int>(lens.size());
  const int longest = *std::max_element(lens.begin(), lens.end());
  const int blocks_per_seq = (std::max(longest, bound) + s.block_size - 1) / s.block_size;
  const size_t block_elems = static_cast<size_t>(s.block_size) * s.num_kv_heads * s.head_dim;
  const size_t needed = static_cast<size_t>(batch) * blocks_per_seq;
  // A pool of >= 1 GiB per tensor, and up to 8 disjoint block tables over it, so repeated calls read DRAM,
  // not the 50 MB L2.
  const size_t elem = cache_elem_bytes(fp8);
  const size_t pool = std::max(needed, (size_t{1} << 30) / (block_elems * elem));
  const int tables = static_cast<int>(std::clamp<size_t>(pool / needed, 1, 8));
  DeviceBuffer k(pool * block_elems * elem), v(pool * block_elems * elem);
  fill_cache(k, pool * block_elems, 2, 2.f, fp8);
  fill_cache(v, pool * block_elems, 3, 1.f, fp8);
  std::vector<int> ids(pool);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(4));
  std::vector<int> table_host(ids.begin(), ids.begin() + needed * tables);
  DeviceBuffer table(table_host.size() * sizeof(int));
  upload(table, table_host);
  std::vector<int> cu(batch + 1);
  std::iota(cu.begin(), cu.end(), 0);
  DeviceBuffer cu_d(cu.size() * sizeof(int)), lens_d(lens.size() * sizeof(int));
  upload(cu_d, cu);
  upload(lens_d, lens);
  const size_t q_elems = static_cast<size_t>(batch) * s.num_heads * s.head_dim;
  DeviceBuffer q(q_elems * 2), out(q_elems * 2);
  fill(q, q_elems, 5, 2.f);
  const size_t ws_bytes = nanovllm::cuda::decode_workspace_bytes(batch, s.num_heads, s.head_dim, sm_count());
  DeviceBuffer ws(ws_bytes);
  check(cudaMemset(ws.ptr, 0, std::max<size_t>(ws_bytes, 16)), "zero workspace");  // the decode's arrival counters
  auto args = make_args(s, batch, 1, bound, q, k, v, cu_d, lens_d, out, fp8);
  // Every key loop that takes these arguments: the CUDA-core one, and the tensor-core one where it applies.
  using nanovllm::cuda::DecodeKernel;
  std::vector<DecodeKernel> loops = {DecodeKernel::kCudaCores};
  if (nanovllm::cuda::decode_kernel_for(args, DecodeKernel::kTensorCores) == DecodeKernel::kTensorCores)
    loops.push_back(DecodeKernel::kTensorCores);
  const bool is_auto_choice_mma =
      nanovllm::cuda::decode_kernel_for(args, DecodeKernel::kAuto) == DecodeKernel::kTensorCores;
  for (const DecodeKernel loop : loops) {
    const auto call = [&](int rep) {
      args.block_tables = table.as<int>() + static_cast<size_t>(rep % tables) * needed;
      nanovllm::cuda::paged_attention_decode(args, ws.ptr, ws_bytes, sm_count(), nullptr, loop);
    };
    const double us = time_us(reps, call);
    // 16 calls queued back to back between one pair of events: launch latency hidden, as in a CUDA graph.
    constexpr int kBurst = 16;
    const double burst_us = time_us(std::max(reps / 4, 3),
                                    [&](int rep) {
                                      for (int i = 0; i < kBurst; ++i) call(rep * kBurst + i);
                                    }) /
                            kBurst;
    check(cudaDeviceSynchronize(), "decode");
    const double keys = std::accumulate(lens.begin(), lens.end(), 0.0);
    const double bytes = 2.0 * keys * s.num_kv_heads * s.head_dim * elem;  // K + V
    const double gbs = bytes / (burst_us * 1e-6) / 1e9;
    const bool mma = loop == DecodeKernel::kTensorCores;
    std::printf(
        "decode  %-10s %s %-5s%s batch %4d ctx %11s | %8.1f us/call | %8.1f us queued | %8.1f MB | "
        "%6.0f GB/s | %5.1f%% of copy | floor %7.1f us\n",
        s.name, fp8 ? "fp8 " : "bf16", mma ? "mma" : "cores", mma == is_auto_choice_mma ? "*" : " ", batch, label, us,
        burst_us, bytes / 1e6, gbs, 100.0 * gbs / copy_gbs, bytes / (copy_gbs * 1e9) * 1e6);
  }
}

void bench_decode(const Shape& s, int batch, int ctx, double copy_gbs, int reps, bool fp8 = false) {
  const std::string label = std::to_string(ctx);
  bench_decode_lens(s, std::vector<int>(batch, ctx), ctx, label.c_str(), copy_gbs, reps, fp8);
}

// Lengths drawn uniformly from [lo, hi] (fixed seed) under a graph bound of max_model_len keys, as in
// the bench workload's decode steps.
void bench_decode_mixed(const Shape& s, int batch, int lo, int hi, int max_model_len, double copy_gbs, int reps,
                        bool fp8 = false) {
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> lens(batch);
  for (int& len : lens) len = dist(gen);
  const std::string label = std::to_string(lo) + "-" + std::to_string(hi);
  bench_decode_lens(s, lens, max_model_len, label.c_str(), copy_gbs, reps, fp8);
}

void bench_prefill(const Shape& s, int batch, int len, int reps, bool fp8 = false) {
  const int blocks_per_seq = (len + s.block_size - 1) / s.block_size;
  const size_t block_elems = static_cast<size_t>(s.block_size) * s.num_kv_heads * s.head_dim;
  const size_t blocks = static_cast<size_t>(batch) * blocks_per_seq;
  const size_t elem = cache_elem_bytes(fp8);
  DeviceBuffer k(blocks * block_elems * elem), v(blocks * block_elems * elem);
  fill_cache(k, blocks * block_elems, 6, 2.f, fp8);
  fill_cache(v, blocks * block_elems, 7, 1.f, fp8);
  std::vector<int> ids(blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(8));
  DeviceBuffer table(ids.size() * sizeof(int));
  upload(table, ids);
  std::vector<int> cu(batch + 1), lens(batch, len);
  for (int i = 0; i <= batch; ++i) cu[i] = i * len;
  DeviceBuffer cu_d(cu.size() * sizeof(int)), lens_d(lens.size() * sizeof(int));
  upload(cu_d, cu);
  upload(lens_d, lens);
  const size_t q_elems = static_cast<size_t>(batch) * len * s.num_heads * s.head_dim;
  DeviceBuffer q(q_elems * 2), out(q_elems * 2);
  fill(q, q_elems, 9, 2.f);
  auto args = make_args(s, batch, len, len, q, k, v, cu_d, lens_d, out, fp8);
  args.block_tables = table.as<int>();
  // Causal: each sequence has len (len + 1) / 2 (query, key) pairs; QK^T and PV are 2 flops per MAC each.
  const double flops = 4.0 * s.num_heads * s.head_dim * batch * (static_cast<double>(len) * (len + 1) / 2);
  // The kernel the engine runs (named by the variant it picks for this shape), and on Hopper every other prefill
  // kernel beside it.
  const nanovllm::cuda::PrefillKernel engine_kernel = nanovllm::cuda::prefill_kernel_for_device();
  // An FP8 cache's shadow, as the engine gives it (its decode is part of each timed call).
  const size_t shadow_bytes = fp8 ? nanovllm::cuda::fp8_prefill_shadow_bytes(args) : 0;
  DeviceBuffer shadow(shadow_bytes);
  for (const nanovllm::cuda::PrefillKernel kernel :
       nanovllm::attention_test::prefill_kernels_to_compare(engine_kernel, args)) {
    const double us = time_us(
        reps, [&](int) { nanovllm::cuda::paged_attention_prefill(args, nullptr, kernel, shadow.ptr, shadow_bytes); });
    check(cudaDeviceSynchronize(), "prefill");
    const std::string name = nanovllm::attention_test::prefill_kernel_name(kernel, args);
    std::printf("prefill %-10s %s batch %4d len %6d %-24s | %9.1f us | %8.2f TFLOP/s\n", s.name, fp8 ? "fp8 " : "bf16",
                batch, len, name.c_str(), us, flops / (us * 1e-6) / 1e12);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  const bool prefill_only = argc > 2 && std::string(argv[2]) == "prefill";
  const bool decode_only = argc > 2 && std::string(argv[2]) == "decode";
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("bench_attention: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  const double copy_gbs = copy_bandwidth_gbs(reps);
  std::printf("device %s, %d SMs, L2 %d MB; device-to-device copy %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, copy_gbs);

  const Shape qwen06{"0.6B(16/8)", 16, 8, 128, 256};
  const Shape qwen8{"8B(32/8)", 32, 8, 128, 256};
  const Shape qwen32{"32B(64/8)", 64, 8, 128, 16};
  const Shape d64{"d64(8/8)", 8, 8, 64, 16};
  if (prefill_only) {  // the prefill rows alone, at the long-context shapes too
    for (const Shape& s : {qwen06, qwen8}) {
      bench_prefill(s, 16, 1024, reps);
      bench_prefill(s, 16, 16384, reps);
      bench_prefill(s, 1, 32768, reps);
    }
    bench_prefill(d64, 16, 1024, reps);
    bench_prefill(qwen06, 16, 1024, reps, true);
    bench_prefill(qwen06, 1, 16384, reps, true);
    return 0;
  }
  if (decode_only) {  // the decode rows alone, every GQA group of the engine's models and mixed lengths
    for (const Shape& s : {qwen06, qwen8, qwen32}) {
      bench_decode(s, 256, 1024, copy_gbs, reps);
      bench_decode(s, 16, 16384, copy_gbs, reps);
      bench_decode(s, 1, 32768, copy_gbs, reps);
      bench_decode(s, 1, 4096, copy_gbs, reps);
      bench_decode(s, 1, 512, copy_gbs, reps);
      for (const int batch : {256, 128, 64, 32}) bench_decode_mixed(s, batch, 100, 2048, 4096, copy_gbs, reps);
    }
    for (const Shape& s : {qwen06, qwen8}) {  // the FP8 cache
      bench_decode(s, 256, 1024, copy_gbs, reps, true);
      bench_decode(s, 16, 16384, copy_gbs, reps, true);
      bench_decode(s, 1, 32768, copy_gbs, reps, true);
      for (const int batch : {128, 32}) bench_decode_mixed(s, batch, 100, 2048, 4096, copy_gbs, reps, true);
    }
    bench_decode(d64, 256, 1024, copy_gbs, reps);
    return 0;
  }
  bench_decode(qwen06, 256, 1024, copy_gbs, reps);
  bench_decode(qwen06, 128, 2048, copy_gbs, reps);
  bench_decode(qwen06, 64, 4096, copy_gbs, reps);
  bench_decode(qwen06, 16, 4096, copy_gbs, reps);
  bench_decode(qwen06, 1, 4096, copy_gbs, reps);
  bench_decode(qwen06, 1, 32768, copy_gbs, reps);
  bench_decode(qwen8, 256, 1024, copy_gbs, reps);
  bench_decode(qwen8, 1, 32768, copy_gbs, reps);
  bench_decode(qwen32, 64, 2048, copy_gbs, reps);
  bench_decode(d64, 256, 1024, copy_gbs, reps);
  bench_prefill(qwen06, 16, 1024, reps);
  bench_prefill(qwen06, 1, 8192, reps);
  bench_prefill(qwen8, 16, 1024, reps);
  // Long contexts, and the FP8 cache beside bf16 at the same shapes.
  bench_decode(qwen06, 16, 16384, copy_gbs, reps);
  // Mixed lengths under a 4,096-key graph bound, as the bench workload's decode steps run.
  for (const int batch : {256, 128, 64, 32}) {
    bench_decode_mixed(qwen06, batch, 100, 2048, 4096, copy_gbs, reps);
    bench_decode_mixed(qwen06, batch, 600, 1100, 4096, copy_gbs, reps);
  }
  for (const bool fp8 : {false, true}) {
    bench_decode(qwen06, 256, 1024, copy_gbs, reps, fp8);
    bench_decode(qwen06, 64, 4096, copy_gbs, reps, fp8);
    bench_decode(qwen06, 1, 32768, copy_gbs, reps, fp8);
    bench_decode(qwen06, 16, 16384, copy_gbs, reps, fp8);
    bench_prefill(qwen06, 16, 1024, reps, fp8);
    bench_prefill(qwen06, 1, 16384, reps, fp8);
  }
  return 0;
}
