#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/call_timing.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_block_gemm.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_skinny.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "common/fp8.h"
#include "common/half_float.h"
#include "common/quoted.h"

namespace nanovllm {
namespace {

constexpr size_t kGemmWorkspaceBytes = 32u << 20;  // what cuBLASLt suggests for Hopper

// Frees on the device the memory came from (a backend may be driven from another thread or device).
void free_device(void* ptr, int device) {
  if (ptr == nullptr) return;
  int current = -1;
  cudaGetDevice(&current);
  if (device != current) cudaSetDevice(device);
  const cudaError_t err = cudaFree(ptr);
  if (device != current) cudaSetDevice(current);
  if (err != cudaSuccess) std::fprintf(stderr, "nanovllm: cudaFree failed: %s\n", cudaGetErrorString(err));
}

void free_pinned(void* ptr) {
  if (ptr == nullptr) return;
  const cudaError_t err = cudaFreeHost(ptr);
  if (err != cudaSuccess) std::fprintf(stderr, "nanovllm: cudaFreeHost failed: %s\n", cudaGetErrorString(err));
}

void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw EngineError(std::string(op) + ": " + what);
}

void require_dtype(const Tensor& t, DType dtype, const char* op, const char* name) {
  require(t.dtype == dtype, op,
          std::string(name) + " has dtype " + dtype_name(t.dtype) + ", expected " + dtype_name(dtype));
  require(!t.empty() || t.numel() == 0, op, std::string(name) + " has no data");
}

// K and V of one layer: both bf16 or both FP8, then with positive, finite scales.
void require_kv_cache(const KvCacheLayer& cache, const char* op) {
  const DType dtype = cache.is_fp8() ? DType::F8_E4M3 : DType::BF16;
  require_dtype(cache.k, dtype, op, "cache.k");
  require_dtype(cache.v, dtype, op, "cache.v");
  const std::string scale_problem = cache.scale_problem();
  require(scale_problem.empty(), op, scale_problem);
}

// The cache's pointers, element type and scales into a kernel's arguments (the K/V write's or attention's).
template <class KernelArgs>
void set_cache_args(KernelArgs& args, const KvCacheLayer& cache) {
  args.k_cache = cache.k.data;
  args.v_cache = cache.v.data;
  args.fp8_cache = cache.is_fp8();
  args.k_scale = cache.k_scale;
  args.v_scale = cache.v_scale;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

const __nv_bfloat16* bf16(const Tensor& t) { return static_cast<const __nv_bfloat16*>(t.data); }
__nv_bfloat16* bf16_mut(const Tensor& t) { return static_cast<__nv_bfloat16*>(t.data); }

struct LinearDims {
  int m, n, k;
};

// The checks linear() and linear_fp8() share, for x [m, k] · weight [n, k]^T (+ bias [n]) into out [m, n]: x
// BF16, the weight 2-D of weight_dtype, out BF16 or F32, bias BF16 or empty, K a multiple of 8 (any N: an odd
// vocabulary is fine), every operand 16-byte aligned.
LinearDims check_linear(const char* op, const Tensor& x, const Tensor& weight, DType weight_dtype, const Tensor& bias,
                        const Tensor& out) {
  require_dtype(x, DType::BF16, op, "x");
  require_dtype(weight, weight_dtype, op, "weight");
  require(out.dtype == DType::BF16 || out.dtype == DType::F32, op, "out must be BF16 or F32");
  const int64_t k = x.dim(-1), m = x.numel() / std::max<int64_t>(k, 1), n = weight.dim(0);
  require(weight.ndim == 2 && weight.dim(1) == k && out.numel() == m * n, op,
          "shapes x " + x.shape_string() + ", weight " + weight.shape_string() + ", out " + out.shape_string());
  require(bias.empty() || (bias.dtype == DType::BF16 && bias.numel() == n), op,
          "bias " + bias.shape_string() + " must be BF16 [" + std::to_string(n) + "]");
  require(k % 8 == 0, op, "K must be a multiple of 8");
  require(aligned16(x.data) && aligned16(weight.data) && aligned16(out.data) && aligned16(bias.data), op,
          "operands must be 16-byte aligned");
  return {static_cast<int>(m), static_cast<int>(n), static_cast<int>(k)};
}

// An FP8 weight's block scales: F32 [ceil(N / 128), ceil(K / 128)] for the linear's dimensions.
void check_block_scale(const char* op, const Tensor& block_scale, const LinearDims& d) {
  require_dtype(block_scale, DType::F32, op, "block_scale");
  require(block_scale.ndim == 2 && block_scale.dim(0) == fp8_blocks(d.n) && block_scale.dim(1) == fp8_blocks(d.k), op,
          "block_scale " + block_scale.shape_string() + " must be [" + std::to_string(fp8_blocks(d.n)) + ", " +
              std::to_string(fp8_blocks(d.k)) + "]");
}

// The value of environment variable `name` among `choices` (name, value); unset or empty is the first.
template <typename T>
T environment_choice(const char* name, std::initializer_list<std::pair<const char*, T>> choices) {
  const char* setting = std::getenv(name);
  if (setting == nullptr || *setting == '\0') return choices.begin()->second;
  std::string expected;
  for (size_t i = 0; i < choices.size(); ++i) {
    const auto& [text, value] = choices.begin()[i];
    if (std::strcmp(setting, text) == 0) return value;
    expected += std::string(i == 0 ? "'" : i + 1 == choices.size() ? " or '" : ", '") + text + "'";
  }
  throw InvalidInput(std::string(name) + " is " + quoted_text(setting) + "; expected " + expected);
}

}  // namespace

CudaBackend::CudaBackend(int device_index) : device_(device_index) {
  int count = 0;
  NANOVLLM_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device_index < 0 || device_index >= count) {
    throw EngineError("CudaBackend: device " + std::to_string(device_index) + " does not exist (" +
                      std::to_string(count) + " CUDA devices)");
  }
  make_current();
  NANOVLLM_CUDA_CHECK(cudaGetDeviceProperties(&props_, device_));
  prefill_kernel_ = cuda::prefill_kernel_for_device();
  NANOVLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  gemm_workspace_ = allocate(kGemmWorkspaceBytes);
  gemm_ = std::make_unique<cuda::Gemm>(gemm_workspace_.data(), kGemmWorkspaceBytes);
  // Same workspace: both GEMMs run on this one stream, one after the other.
  fp8_gemm_ = std::make_unique<cuda::Fp8BlockGemm>(gemm_workspace_.data(), kGemmWorkspaceBytes);
  fp8_gemm_path_ = environment_choice<Fp8LinearPath>("NANOVLLM_FP8_GEMM", {{"auto", Fp8LinearPath::kAuto},
                                                                           {"dequant", Fp8LinearPath::kDequantize},
                                                                           {"block", Fp8LinearPath::kBlockScaled}});
  // An FP8 cache's long prompts multiply in bf16 (the shadow of their codes) or in E4M3.
  fp8_attention_products_ = environment_choice<bool>("NANOVLLM_FP8_ATTENTION", {{"bf16", false}, {"fp8", true}});
  // Decode steps above the GEMV's rows fold their norms into the skinny GEMM only when asked: measured slower.
  skinny_norm_fold_ = environment_choice<bool>("NANOVLLM_SKINNY_FOLD", {{"0", false}, {"1", true}});
  decode_kernel_ =
      environment_choice<cuda::DecodeKernel>("NANOVLLM_DECODE_ATTENTION", {{"auto", cuda::DecodeKernel::kAuto},
                                                                           {"cores", cuda::DecodeKernel::kCudaCores},
                                                                           {"mma", cuda::DecodeKernel::kTensorCores}});
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);  // no throwing from a destructor
  if (stream_) cudaStreamSynchronize(stream_);
  gemm_.reset();
  fp8_gemm_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

// Ops may be called from a thread other than the constructor's (the current device is per thread). Only a
// differing device is switched, so the common case costs one cudaGetDevice and is safe inside a capture.
void CudaBackend::make_current() const {
  int current = -1;
  NANOVLLM_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device_) NANOVLLM_CUDA_CHECK(cudaSetDevice(device_));
}

std::string CudaBackend::device_name() const { return props_.name; }

CudaBackend::MemoryInfo CudaBackend::memory_info() const {
  make_current();
  MemoryInfo info{};
  NANOVLLM_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

size_t CudaBackend::bytes_allocated() const { return live_bytes_->load(); }

void CudaBackend::reserve(const BackendLimits& limits) {
  make_current();
  if (limits.head_dim > 0) {
    const std::string why = cuda::unsupported_attention_heads(limits.num_heads, limits.num_kv_heads, limits.head_dim);
    if (!why.empty()) throw InvalidInput("the CUDA backend cannot run this model: " + why + "; --device cpu runs it");
  }
  if (limits.max_num_seqs > cuda::decode_max_num_seqs())
    throw InvalidInput("the CUDA backend takes at most " + std::to_string(cuda::decode_max_num_seqs()) +
                       " sequences a step; max_num_seqs is " + std::to_string(limits.max_num_seqs));
  limits_ = limits;
  if (limits.max_num_seqs > 0 && limits.num_heads > 0 && limits.head_dim > 0) {
    const size_t bytes = cuda::decode_workspace_bytes(limits.max_num_seqs, limits.num_heads, limits.head_dim,
                                                      props_.multiProcessorCount);
    attention_workspace_ = bytes ? allocate(bytes) : Buffer();
    // The decode kernel's arrival counters (the workspace's tail) start, and stay between launches, at zero;
    // zeroed on the stream the kernels run on (a cudaMemset would not be ordered before them).
    const size_t counters = cuda::decode_workspace_counter_bytes(limits.max_num_seqs, limits.num_heads);
    if (bytes)
      NANOVLLM_CUDA_CHECK(
          cudaMemsetAsync(static_cast<char*>(attention_workspace_.data()) + bytes - counters, 0, counters, stream_));
  }
  if (limits.max_logits_rows > 0 && limits.vocab_size > 0) {
    sampler_workspace_ = allocate(cuda::sampler_workspace_bytes(limits.max_logits_rows, limits.vocab_size));
  }
  reserve_fp8_prefill_shadow(limits);
  reserved_ = true;
  if (fp8_gemm_path_ != Fp8LinearPath::kDequantize) reserve_fp8_activations();
}

void CudaBackend::reserve_fp8_prefill_shadow(const BackendLimits& limits) {
  fp8_prefill_shadow_ = Buffer();
  if (!limits.fp8_kv_cache || limits.max_model_len <= 0) return;
  // Sized here rather than on first use, so that the KV cache (sized from what is left after reserve) does not
  // take memory the shadow will need. Launches with more or longer sequences than this run on the FP8 kernel.
  cuda::PagedAttentionArgs probe;
  probe.num_seqs = std::min(limits.max_num_seqs, kFp8PrefillShadowSequences);
  probe.max_seqlen_q = limits.max_num_tokens;  // the longest prompt part one step can hold
  probe.max_seqlen_k = limits.max_model_len;
  probe.num_kv_heads = limits.num_kv_heads;
  probe.head_dim = limits.head_dim;
  probe.block_size = limits.kv_block_size;
  probe.fp8_cache = true;
  if (probe.num_seqs <= 0 || !cuda::fp8_prefill_shadow_applies(probe, prefill_kernel_)) return;
  fp8_prefill_shadow_ = allocate(std::min(cuda::fp8_prefill_shadow_bytes(probe), kMaxFp8PrefillShadowBytes));
}

Buffer CudaBackend::allocate(size_t bytes) {
  make_current();
  void* ptr = nullptr;
  if (bytes > 0) {
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear it: out of memory is reported here, not by the next launch
      throw EngineError("cudaMalloc of " + std::to_string(bytes) + " bytes on device " + std::to_string(device_) +
                        " failed: " + cudaGetErrorString(err));
    }
    *live_bytes_ += bytes;
  }
  // The count is shared with the deleter: a Buffer may outlive the backend that made it.
  return Buffer(ptr, bytes, [device = device_, live = live_bytes_, bytes](void* p) {
    if (p == nullptr) return;
    *live -= bytes;
    free_device(p, device);
  });
}

Buffer CudaBackend::allocate_host(size_t bytes) {
  void* ptr = nullptr;
  if (bytes > 0) NANOVLLM_CUDA_CHECK(cudaMallocHost(&ptr, bytes));
  return Buffer(ptr, bytes, &free_pinned);
}

void CudaBackend::upload(const void* host, void* dst, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  NANOVLLM_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_));
  NANOVLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::download(const void* src, void* host, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  NANOVLLM_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_));
  NANOVLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::upload_async(const void* host, void* dst, size_t bytes) {
  make_current();
  if (bytes == 0) return;
  NANOVLLM_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::download_async(const void* src, void* pinned_dst, size_t bytes) {
  make_current();
  if (bytes == 0) return;
  NANOVLLM_CUDA_CHECK(cudaMemcpyAsync(pinned_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
}

void CudaBackend::upload_ranges(const void* host, void* dst, std::span<const CopyRange> ranges,
                                const DeviceIdSource& from) {
  static_assert(kMaxUploadRanges <= static_cast<size_t>(cuda::kMaxUploadRangesArgs));
  check_upload_ranges("cuda upload_ranges", ranges, from);
  make_current();
  cuda::UploadRangesArgs args;
  args.host = static_cast<const char*>(host);
  args.dst = static_cast<char*>(dst);
  for (const CopyRange& r : ranges) {
    if (r.bytes == 0) continue;
    if (from.range == static_cast<int>(&r - ranges.data())) args.ids_range = args.num_ranges;
    args.offset[args.num_ranges] = r.offset;
    args.words[args.num_ranges] = static_cast<uint32_t>(r.bytes / 4);
    ++args.num_ranges;
  }
  args.ids = from.ids;
  cuda::launch_upload_ranges(args, stream_);
}

// No timing: cheaper to record. Waiting for an event never recorded returns at once, as QueueMark promises.
class CudaBackend::StreamMark final : public QueueMark {
 public:
  explicit StreamMark(const CudaBackend& backend) : backend_(backend) {
    backend_.make_current();
    NANOVLLM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~StreamMark() override {
    cudaSetDevice(backend_.device_);  // no throwing from a destructor
    cudaEventDestroy(event_);
  }
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;
  void record() override {
    backend_.make_current();
    NANOVLLM_CUDA_CHECK(cudaEventRecord(event_, backend_.stream_));
  }
  void wait() override { NANOVLLM_CUDA_CHECK(cudaEventSynchronize(event_)); }

 private:
  const CudaBackend& backend_;
  cudaEvent_t event_ = nullptr;
};

std::unique_ptr<QueueMark> CudaBackend::create_mark() { return std::make_unique<StreamMark>(*this); }

void CudaBackend::synchronize() {
  make_current();
  NANOVLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::upload_converted(const void* host_src, DType src_dtype, void* dst, int64_t numel) {
  if (numel <= 0) return;
  if (src_dtype == DType::BF16) return upload(host_src, dst, static_cast<size_t>(numel) * 2);
  require(src_dtype == DType::F32 || src_dtype == DType::F16, "upload_converted",
          std::string("cannot convert ") + dtype_name(src_dtype) + " to BF16");
  make_current();
  // Convert on the host into two pinned halves: one is filled while the other's copy runs.
  constexpr int64_t kChunkElems = 4 << 20;
  const int64_t chunk = std::min(numel, kChunkElems);
  Buffer staging = allocate_host(static_cast<size_t>(2 * chunk) * sizeof(uint16_t));
  std::array<cudaEvent_t, 2> copied{};
  for (auto& e : copied) NANOVLLM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  auto destroy_events = [&] {
    for (auto& e : copied) cudaEventDestroy(e);
  };
  try {
    auto* out = static_cast<uint16_t*>(dst);
    for (int64_t begin = 0, i = 0; begin < numel; begin += chunk, ++i) {
      const int64_t n = std::min(chunk, numel - begin);
      const int half = static_cast<int>(i & 1);
      uint16_t* stage = static_cast<uint16_t*>(staging.data()) + half * chunk;
      if (i >= 2) NANOVLLM_CUDA_CHECK(cudaEventSynchronize(copied[half]));
      if (src_dtype == DType::F32) {
        const float* src = static_cast<const float*>(host_src) + begin;
        for (int64_t j = 0; j < n; ++j) stage[j] = float_to_bf16(src[j]);
      } else {
        const uint16_t* src = static_cast<const uint16_t*>(host_src) + begin;
        for (int64_t j = 0; j < n; ++j) stage[j] = float_to_bf16(f16_to_float(src[j]));
      }
      NANOVLLM_CUDA_CHECK(
          cudaMemcpyAsync(out + begin, stage, static_cast<size_t>(n) * 2, cudaMemcpyHostToDevice, stream_));
      NANOVLLM_CUDA_CHECK(cudaEventRecord(copied[half], stream_));
    }
    NANOVLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  } catch (...) {
    cudaStreamSynchronize(stream_);
    destroy_events();
    throw;
  }
  destroy_events();
}

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  make_current();
  require_dtype(ids, DType::I32, "embedding", "ids");
  require_dtype(table, DType::BF16, "embedding", "table");
  require_dtype(out, DType::BF16, "embedding", "out");
  const int64_t hidden = table.dim(-1);
  require(hidden % 8 == 0, "embedding", "hidden size must be a multiple of 8");
  require(out.numel() == ids.numel() * hidden, "embedding",
          "out " + out.shape_string() + " does not match ids " + ids.shape_string() + " x hidden " +
              std::to_string(hidden));
  cuda::launch_embedding(ids.as<int>(), bf16(table), bf16_mut(out), static_cast<int>(ids.numel()),
                         static_cast<int>(hidden), vocab_start, table.dim(0), stream_);
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  make_current();
  require_dtype(x, DType::BF16, "rms_norm", "x");
  require_dtype(weight, DType::BF16, "rms_norm", "weight");
  require_dtype(out, DType::BF16, "rms_norm", "out");
  const int64_t hidden = x.dim(-1);
  require(weight.numel() == hidden && out.numel() == x.numel(), "rms_norm",
          "shapes x " + x.shape_string() + ", weight " + weight.shape_string() + ", out " + out.shape_string());
  require(hidden % 8 == 0 && hidden <= cuda::kMaxNormHidden, "rms_norm",
          "hidden size " + std::to_string(hidden) + " must be a multiple of 8 and at most 16384");
  cuda::launch_rms_norm(bf16(x), bf16(weight), eps, bf16_mut(out), static_cast<int>(x.numel() / hidden),
                        static_cast<int>(hidden), stream_);
}

void CudaBackend::add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out) {
  make_current();
  require_dtype(x, DType::BF16, "add_rms_norm", "x");
  require_dtype(residual, DType::BF16, "add_rms_norm", "residual");
  require_dtype(weight, DType::BF16, "add_rms_norm", "weight");
  require_dtype(out, DType::BF16, "add_rms_norm", "out");
  const int64_t hidden = x.dim(-1);
  require(weight.numel() == hidden && out.numel() == x.numel() && residual.numel() == x.numel(), "add_rms_norm",
          "shapes x " + x.shape_string() + ", residual " + residual.shape_string() + ", weight " +
              weight.shape_string() + ", out " + out.shape_string());
  require(hidden % 8 == 0 && hidden <= cuda::kMaxNormHidden, "add_rms_norm",
          "hidden size " + std::to_string(hidden) + " must be a multiple of 8 and at most 16384");
  cuda::launch_add_rms_norm(bf16(x), bf16_mut(residual), bf16(weight), eps, bf16_mut(out),
                            static_cast<int>(x.numel() / hidden), static_cast<int>(hidden), stream_);
}

void CudaBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) {
  make_current();
  const LinearDims d = check_linear("linear", x, weight, DType::BF16, bias, out);
  gemm_->run(bf16(x), bf16(weight), bias.empty() ? nullptr : bf16(bias), out.data, out.dtype, d.m, d.n, d.k, stream_);
}

void CudaBackend::tune_linear(const Tensor& weight, DType out_dtype) {
  make_current();
  require_dtype(weight, DType::BF16, "tune_linear", "weight");
  require(weight.ndim == 2, "tune_linear", "weight must be [N, K], not " + weight.shape_string());
  require(out_dtype == DType::BF16 || out_dtype == DType::F32, "tune_linear", "out_dtype must be BF16 or F32");
  if (weight.bytes() < 2 * static_cast<size_t>(props_.l2CacheSize)) return;
  const int64_t n = weight.dim(0), k = weight.dim(1), rows = cuda::kGemvMaxTokensAnyWeight;
  Buffer x = allocate(static_cast<size_t>(rows * k) * sizeof(__nv_bfloat16));
  Buffer out = allocate(static_cast<size_t>(rows * n) * dtype_size(out_dtype));
  NANOVLLM_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.bytes(), stream_));
  gemm_->measure_small_row_paths(bf16(weight), out_dtype, static_cast<int>(n), static_cast<int>(k),
                                 static_cast<const __nv_bfloat16*>(x.data()), out.data(), stream_);
}

void CudaBackend::reserve_fp8_linear(int64_t n, int64_t k) {
  const size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(k) * sizeof(__nv_bfloat16);
  if (bytes > fp8_weight_scratch_.bytes()) fp8_weight_scratch_ = allocate(bytes);
  fp8_max_k_ = std::max(fp8_max_k_, k);
  if (fp8_gemm_path_ != Fp8LinearPath::kDequantize) reserve_fp8_activations();
}

void CudaBackend::reserve_fp8_activations() {
  const int64_t rows = limits_.max_num_tokens, k = fp8_max_k_;
  if (rows <= fp8_activation_rows_ && k <= fp8_activation_k_) return;
  const int64_t new_rows = std::max(rows, fp8_activation_rows_), new_k = std::max(k, fp8_activation_k_);
  if (new_rows == 0 || new_k == 0) return;
  // Freed before allocating: the old and new scratch need not fit side by side.
  fp8_activation_codes_ = Buffer();
  fp8_activation_scales_ = Buffer();
  fp8_activation_rows_ = fp8_activation_k_ = 0;
  fp8_activation_codes_ = allocate(static_cast<size_t>(new_rows * new_k));
  fp8_activation_scales_ = allocate(static_cast<size_t>(new_rows * fp8_blocks(new_k)) * sizeof(float));
  fp8_activation_rows_ = new_rows;
  fp8_activation_k_ = new_k;
}

void CudaBackend::set_fp8_gemm_path(Fp8LinearPath path) {
  if (path == Fp8LinearPath::kGemv)
    throw EngineError("set_fp8_gemm_path: the path above 16 rows is kAuto, kDequantize or kBlockScaled");
  make_current();
  fp8_gemm_path_ = path;
  if (path != Fp8LinearPath::kDequantize) reserve_fp8_activations();
}

void CudaBackend::prepare_fp8_linear(const Tensor& weight, const Tensor& block_scale) {
  make_current();
  const char* op = "prepare_fp8_linear";
  require_dtype(weight, DType::F8_E4M3, op, "weight");
  require_dtype(block_scale, DType::F32, op, "block_scale");
  require(weight.ndim == 2, op, "weight " + weight.shape_string() + " must be 2-D");
  const int64_t n = weight.dim(0), k = weight.dim(1), rows = fp8_blocks(n), cols = fp8_blocks(k);
  require(block_scale.ndim == 2 && block_scale.dim(0) == rows && block_scale.dim(1) == cols, op,
          "block_scale " + block_scale.shape_string() + " does not match weight " + weight.shape_string());
  padded_fp8_scales_.erase(block_scale.data);  // an address reused by a later weight must not find stale scales
  const int64_t stride = cuda::fp8_weight_scale_row_stride(k);
  if (stride == cols || rows == 0) return;  // already cuBLASLt's layout
  PaddedScales padded{allocate(static_cast<size_t>(rows * stride) * sizeof(float)), n, k};
  NANOVLLM_CUDA_CHECK(cudaMemsetAsync(padded.scales.data(), 0, padded.scales.bytes(), stream_));
  NANOVLLM_CUDA_CHECK(cudaMemcpy2DAsync(padded.scales.data(), static_cast<size_t>(stride) * sizeof(float),
                                        block_scale.data, static_cast<size_t>(cols) * sizeof(float),
                                        static_cast<size_t>(cols) * sizeof(float), static_cast<size_t>(rows),
                                        cudaMemcpyDeviceToDevice, stream_));
  padded_fp8_scales_.emplace(block_scale.data, std::move(padded));
}

bool CudaBackend::block_scaled_linear_fp8(const Tensor& x, const Tensor& weight, const Tensor& block_scale,
                                          const Tensor& bias, Tensor& out, const cuda::GemvArgs& whole) {
  const int64_t k = x.dim(-1), m = x.numel() / std::max<int64_t>(k, 1), n = weight.dim(0);
  if (out.dtype != DType::BF16 || k % 16 != 0 || m > fp8_activation_rows_ || k > fp8_activation_k_) return false;
  // cuBLASLt's block-scaled GEMM takes only multiples of 4 rows (measured: it lists no kernel for M = 17, 18, 31,
  // 33 or 12,823): the GEMM takes the first m4 rows and the FP8 GEMV the last one to three.
  const int64_t m4 = m & ~int64_t{3};
  cuda::GemvArgs tail = whole;
  tail.x = whole.x + m4 * k;
  tail.out = static_cast<__nv_bfloat16*>(whole.out) + m4 * n;
  tail.tokens = static_cast<int>(m - m4);
  if (m4 < m && !cuda::gemv_supports(tail)) return false;
  const float* w_scales = block_scale.as<float>();
  if (cuda::fp8_weight_scale_row_stride(k) != fp8_blocks(k)) {
    const auto padded = padded_fp8_scales_.find(block_scale.data);
    if (padded == padded_fp8_scales_.end() || padded->second.n != n || padded->second.k != k) return false;
    w_scales = static_cast<const float*>(padded->second.scales.data());
  }
  if (!aligned16(w_scales)) return false;
  cuda::Fp8BlockGemmArgs args;
  args.x_codes = static_cast<const uint8_t*>(fp8_activation_codes_.data());
  args.x_scales = static_cast<const float*>(fp8_activation_scales_.data());
  args.w_codes = weight.as<uint8_t>();
  args.w_scales = w_scales;
  args.bias = bias.empty() ? nullptr : bf16(bias);
  args.out = bf16_mut(out);
  args.m = static_cast<int>(m4);
  args.n = static_cast<int>(n);
  args.k = static_cast<int>(k);
  if (!fp8_gemm_->supports(args)) return false;
  cuda::launch_quantize_fp8_activations(bf16(x), static_cast<uint8_t*>(fp8_activation_codes_.data()),
                                        static_cast<float*>(fp8_activation_scales_.data()), args.m, args.k, stream_);
  if (!fp8_gemm_->run(args, stream_)) return false;
  if (m4 < m) cuda::launch_gemv(tail, props_.multiProcessorCount, stream_);
  return true;
}

void CudaBackend::linear_fp8(const Tensor& x, const Tensor& weight, const Tensor& block_scale, const Tensor& bias,
                             Tensor& out) {
  make_current();
  const char* op = "linear_fp8";
  const LinearDims d = check_linear(op, x, weight, DType::F8_E4M3, bias, out);
  check_block_scale(op, block_scale, d);
  cuda::GemvArgs gemv;
  gemv.x = bf16(x);
  gemv.weight_fp8 = weight.as<uint8_t>();
  gemv.block_scale = block_scale.as<float>();
  gemv.bias = bias.empty() ? nullptr : bf16(bias);
  gemv.out = out.data;
  gemv.out_dtype = out.dtype;
  gemv.tokens = d.m;
  gemv.n = d.n;
  gemv.k = d.k;
  if (cuda::gemv_supports(gemv)) {
    last_fp8_linear_path_ = Fp8LinearPath::kGemv;
    return cuda::launch_gemv(gemv, props_.multiProcessorCount, stream_);
  }
  const bool block_scaled = fp8_gemm_path_ == Fp8LinearPath::kBlockScaled ||
                            (fp8_gemm_path_ == Fp8LinearPath::kAuto && weight.numel() >= kBlockScaledMinWeight);
  if (block_scaled) {
    if (block_scaled_linear_fp8(x, weight, block_scale, bias, out, gemv)) {
      last_fp8_linear_path_ = Fp8LinearPath::kBlockScaled;
      return;
    }
    // Once per weight shape, where the block-scaled path was asked for by name (a run that measures it): where
    // it was not taken. Under kAuto a fallback (a bias, an odd shape) is an ordinary choice, made silently.
    if (fp8_gemm_path_ == Fp8LinearPath::kBlockScaled && fp8_fallback_shapes_.emplace(d.n, d.k).second)
      std::fprintf(stderr, "nanovllm: block-scaled FP8 GEMM not taken for N=%d K=%d (first at M=%d): dequantising\n",
                   d.n, d.k, d.m);
  }
  require(fp8_weight_scratch_.bytes() >= weight.numel() * sizeof(__nv_bfloat16), op,
          "weight " + weight.shape_string() + " was not reserved (reserve_fp8_linear)");
  auto* dequantised = static_cast<__nv_bfloat16*>(fp8_weight_scratch_.data());
  cuda::launch_dequantize_fp8_weight(weight.as<uint8_t>(), block_scale.as<float>(), dequantised, d.n, d.k, stream_);
  gemm_->run(bf16(x), dequantised, gemv.bias, out.data, out.dtype, d.m, d.n, d.k, stream_);
  last_fp8_linear_path_ = Fp8LinearPath::kDequantize;
}

void CudaBackend::qk_norm_rope_cache(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                                     const Tensor& positions, const Tensor& rope, const Tensor& slot_mapping,
                                     int num_heads, int num_kv_heads, int head_dim, KvCacheLayer& cache,
                                     Tensor& q_out) {
  make_current();
  const char* op = "qk_norm_rope_cache";
  require_dtype(qkv, DType::BF16, op, "qkv");
  require_dtype(positions, DType::I32, op, "positions");
  require_dtype(rope, DType::F32, op, "rope");
  require_dtype(slot_mapping, DType::I32, op, "slot_mapping");
  require_kv_cache(cache, op);
  require_dtype(q_out, DType::BF16, op, "q_out");
  const int64_t t = qkv.dim(0);
  require(qkv.row_elems() == static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim, op,
          "qkv " + qkv.shape_string() + " does not hold " + std::to_string(num_heads) + " + 2 x " +
              std::to_string(num_kv_heads) + " heads of " + std::to_string(head_dim));
  require(positions.numel() == t && slot_mapping.numel() == t && q_out.numel() == t * num_heads * head_dim, op,
          "positions / slot_mapping / q_out do not match " + std::to_string(t) + " tokens");
  require(rope.dim(-1) == head_dim, op, "rope " + rope.shape_string() + " must be [max_pos, head_dim]");
  require(q_norm.empty() || (q_norm.dtype == DType::BF16 && q_norm.numel() == head_dim), op, "q_norm must be [d]");
  require(k_norm.empty() || (k_norm.dtype == DType::BF16 && k_norm.numel() == head_dim), op, "k_norm must be [d]");
  cuda::QkNormRopeCacheArgs args;
  args.qkv = bf16(qkv);
  args.q_norm = q_norm.empty() ? nullptr : bf16(q_norm);
  args.k_norm = k_norm.empty() ? nullptr : bf16(k_norm);
  args.positions = positions.as<int>();
  args.rope = rope.as<float>();
  args.slot_mapping = slot_mapping.as<int>();
  set_cache_args(args, cache);
  args.q_out = bf16_mut(q_out);
  args.num_tokens = static_cast<int>(t);
  args.num_heads = num_heads;
  args.num_kv_heads = num_kv_heads;
  args.head_dim = head_dim;
  args.eps = eps;
  cuda::launch_qk_norm_rope_cache(args, stream_);
}

void CudaBackend::paged_attention(const Tensor& q, const KvCacheLayer& cache, const AttentionBatch& batch,
                                  int num_heads, int num_kv_heads, int head_dim, float scale, Tensor& out) {
  make_current();
  const char* op = "paged_attention";
  require_dtype(q, DType::BF16, op, "q");
  require_dtype(out, DType::BF16, op, "out");
  require_kv_cache(cache, op);
  require_dtype(batch.cu_seqlens_q, DType::I32, op, "cu_seqlens_q");
  require_dtype(batch.seq_lens_k, DType::I32, op, "seq_lens_k");
  require_dtype(batch.block_tables, DType::I32, op, "block_tables");
  require(q.numel() == out.numel() && q.row_elems() == static_cast<int64_t>(num_heads) * head_dim, op,
          "q " + q.shape_string() + " / out " + out.shape_string() + " must be [T, nh * d]");
  cuda::PagedAttentionArgs args;
  args.q = bf16(q);
  set_cache_args(args, cache);
  args.cu_seqlens_q = batch.cu_seqlens_q.as<int>();
  args.seq_lens_k = batch.seq_lens_k.as<int>();
  args.block_tables = batch.block_tables.as<int>();
  args.out = bf16_mut(out);
  args.num_seqs = batch.num_seqs;
  args.max_seqlen_q = batch.max_seqlen_q;
  args.max_seqlen_k = batch.max_seqlen_k;
  args.max_blocks_per_seq = batch.max_blocks_per_seq;
  args.block_size = batch.block_size;
  args.num_heads = num_heads;
  args.num_kv_heads = num_kv_heads;
  args.head_dim = head_dim;
  args.scale = scale;
  if (batch.decode_only || batch.num_decode_rows > 0)
    require(reserved_, op, "reserve() must be called before decode attention (it sizes the split-KV workspace)");
  if (batch.decode_only) {
    cuda::paged_attention_decode(args, attention_workspace_.data(), attention_workspace_.bytes(),
                                 props_.multiProcessorCount, stream_, decode_kernel_);
  } else if (batch.num_decode_rows > 0) {
    // A mixed step: the decode rows through the split-KV decode kernel, the prompt chunks after them through the
    // prefill kernel. In the prefill launch a decode row would take a whole query tile and read its keys once per
    // query head instead of once per KV head. Both kernels address q and out by cu_seqlens_q's absolute rows.
    const int d = batch.num_decode_rows;
    require(d < batch.num_seqs, op, "num_decode_rows must leave prompt rows (else the step is decode_only)");
    cuda::PagedAttentionArgs decode = args;
    decode.num_seqs = d;
    decode.max_seqlen_q = 1;
    cuda::paged_attention_decode(decode, attention_workspace_.data(), attention_workspace_.bytes(),
                                 props_.multiProcessorCount, stream_, decode_kernel_);
    cuda::PagedAttentionArgs prefill = args;
    prefill.cu_seqlens_q += d;
    prefill.seq_lens_k += d;
    prefill.block_tables += static_cast<size_t>(d) * batch.max_blocks_per_seq;
    prefill.num_seqs -= d;
    run_prefill_attention(prefill);
  } else {
    run_prefill_attention(args);
  }
}

void CudaBackend::run_prefill_attention(const cuda::PagedAttentionArgs& args) {
  void* shadow = fp8_prefill_shadow_.data();
  const size_t shadow_bytes = fp8_prefill_shadow_.bytes();
  const bool e4m3 =
      fp8_attention_products_ && cuda::fp8_prefill_takes_shadow(args, prefill_kernel_, shadow, shadow_bytes);
  cuda::paged_attention_prefill(args, stream_, e4m3 ? cuda::PrefillKernel::kWgmmaFp8Mma : prefill_kernel_, shadow,
                                shadow_bytes);
}

void CudaBackend::silu_and_mul(const Tensor& gate_up, Tensor& out) {
  make_current();
  require_dtype(gate_up, DType::BF16, "silu_and_mul", "gate_up");
  require_dtype(out, DType::BF16, "silu_and_mul", "out");
  const int64_t inter = gate_up.dim(-1) / 2, t = gate_up.numel() / std::max<int64_t>(2 * inter, 1);
  require(gate_up.dim(-1) == 2 * inter && out.numel() == t * inter, "silu_and_mul",
          "gate_up " + gate_up.shape_string() + " / out " + out.shape_string() + " must be [T, 2I] / [T, I]");
  require(inter % 8 == 0, "silu_and_mul", "intermediate size must be a multiple of 8");
  cuda::launch_silu_and_mul(bf16(gate_up), bf16_mut(out), static_cast<int>(t), static_cast<int>(inter), stream_);
}

cuda::GemvArgs CudaBackend::checked_gemv_args(const char* op, const Tensor& x, const Tensor& weight,
                                              const Tensor& block_scale, const Tensor& bias, const Tensor& out) {
  const bool fp8 = !block_scale.empty();
  const LinearDims d = check_linear(op, x, weight, fp8 ? DType::F8_E4M3 : DType::BF16, bias, out);
  if (fp8) check_block_scale(op, block_scale, d);
  cuda::GemvArgs gemv;
  gemv.x = bf16(x);
  if (fp8) {
    gemv.weight_fp8 = weight.as<uint8_t>();
    gemv.block_scale = block_scale.as<float>();
  } else {
    gemv.weight = bf16(weight);
  }
  gemv.bias = bias.empty() ? nullptr : bf16(bias);
  gemv.out = out.data;
  gemv.out_dtype = out.dtype;
  gemv.tokens = d.m;
  gemv.n = d.n;
  gemv.k = d.k;
  return gemv;
}

void CudaBackend::attach_folded_norm_input(const char* op, const FoldedNormInput& input_norm,
                                           cuda::GemvArgs& gemv) const {
  require_norm_sums(input_norm.sums, gemv.tokens, op, "input_norm.sums");
  gemv.norm.input_sum_squares = static_cast<const cuda::GemvNormSum*>(input_norm.sums.data);
  gemv.norm.eps = input_norm.eps;
}

void CudaBackend::launch_folded_gemv(const char* op, const cuda::GemvArgs& gemv) {
  if (!gemm_->run_gemv_or_skinny(gemv, stream_))
    throw EngineError(std::string(op) + ": no folded-norm kernel for T=" + std::to_string(gemv.tokens) +
                      " N=" + std::to_string(gemv.n) + " K=" + std::to_string(gemv.k) + " (see supports_norm_fold)");
  if (gemv.weight_fp8 != nullptr) last_fp8_linear_path_ = Fp8LinearPath::kGemv;
}

// Decode batches (the GEMV's row counts, and the skinny GEMM's for bf16 weights) only: above
// them the GEMM and silu_and_mul run apart, and the refusal comes before any checking (linear() checks the same
// operands next).
bool CudaBackend::linear_silu_and_mul(const Tensor& x, const Tensor& weight, const Tensor& block_scale,
                                      const FoldedNormInput& input_norm, Tensor& out) {
  const int64_t max_rows = std::max(cuda::kGemvMaxTokens, cuda::kSkinnyGemmSmallWeightMaxTokens);
  if (x.numel() > max_rows * x.dim(-1)) return false;
  make_current();
  const char* op = "linear_silu_and_mul";
  require_dtype(out, DType::BF16, op, "out");
  // The same operands as linear() into [T, 2I], with out [T, I].
  const Tensor gate_up_shape{out.data, DType::BF16, {out.numel() / std::max<int64_t>(out.dim(-1), 1), 2 * out.dim(-1)}};
  cuda::GemvArgs gemv = checked_gemv_args(op, x, weight, block_scale, Tensor{}, gate_up_shape);
  gemv.n /= 2;
  gemv.swiglu = true;
  if (!input_norm.sums.empty()) attach_folded_norm_input(op, input_norm, gemv);
  if (!gemm_->run_gemv_or_skinny(gemv, stream_)) return false;
  if (gemv.weight_fp8 != nullptr) last_fp8_linear_path_ = Fp8LinearPath::kGemv;
  return true;
}

bool CudaBackend::supports_norm_fold(int64_t tokens, int64_t hidden, DType weight_dtype,
                                     int64_t largest_weight_elements) const {
  // Every linear around the norms must be a GEMV (or, for bf16 weights on sm_90, a skinny GEMM) at these rows: the
  // largest decides; and the fold must pay there (gemv_norm_fold_pays).
  const bool fp8 = weight_dtype == DType::F8_E4M3;
  int max_tokens = cuda::gemv_max_tokens(largest_weight_elements, fp8);
  if (weight_dtype == DType::BF16 && skinny_norm_fold_)
    max_tokens = std::max(max_tokens, gemm_->skinny_max_tokens(largest_weight_elements));
  return (weight_dtype == DType::BF16 || fp8) && tokens >= 1 && tokens <= max_tokens &&
         cuda::gemv_norm_fold_pays(tokens, largest_weight_elements, fp8) && hidden % 8 == 0 && hidden >= 8 &&
         hidden <= cuda::kGemvMaxNormWidth;
}

int64_t CudaBackend::folded_norm_sum_words() const {
  return static_cast<int64_t>(sizeof(cuda::GemvNormSum) / sizeof(int64_t));
}

void CudaBackend::require_norm_sums(const Tensor& sums, int64_t rows, const char* op, const char* what) const {
  require_dtype(sums, DType::I64, op, what);
  require(sums.numel() == rows * folded_norm_sum_words(), op,
          std::string(what) + " " + sums.shape_string() + " must be [" + std::to_string(rows) + ", " +
              std::to_string(folded_norm_sum_words()) + "]");
  require(reinterpret_cast<uintptr_t>(sums.data) % alignof(cuda::GemvNormSum) == 0, op,
          std::string(what) + " must be " + std::to_string(alignof(cuda::GemvNormSum)) + "-byte aligned");
}

void CudaBackend::linear_add_folded_norm(const Tensor& x, const Tensor& weight, const Tensor& block_scale,
                                         Tensor& residual, const Tensor& norm_weight, Tensor& sums, Tensor& stale_sums,
                                         Tensor& out) {
  make_current();
  const char* op = "linear_add_folded_norm";
  require_dtype(out, DType::BF16, op, "out");
  cuda::GemvArgs gemv = checked_gemv_args(op, x, weight, block_scale, Tensor{}, out);
  require_dtype(residual, DType::BF16, op, "residual");
  require_dtype(norm_weight, DType::BF16, op, "norm_weight");
  require(residual.numel() == out.numel() && norm_weight.numel() == gemv.n, op,
          "shapes residual " + residual.shape_string() + ", norm_weight " + norm_weight.shape_string() + " for out " +
              out.shape_string());
  require_norm_sums(sums, gemv.tokens, op, "sums");
  const int64_t words = folded_norm_sum_words();
  if (!stale_sums.empty()) {
    require_norm_sums(stale_sums, stale_sums.numel() / words, op, "stale_sums");  // whole rows
    const auto* stale = static_cast<const char*>(stale_sums.data);
    const auto* added = static_cast<const char*>(sums.data);
    require(stale + stale_sums.bytes() <= added || added + sums.bytes() <= stale, op,
            "stale_sums " + stale_sums.shape_string() + " overlaps sums " + sums.shape_string());
  }
  gemv.norm.residual = bf16_mut(residual);
  gemv.norm.norm_weight = bf16(norm_weight);
  gemv.norm.sum_squares = static_cast<cuda::GemvNormSum*>(sums.data);
  gemv.norm.stale_sums = static_cast<cuda::GemvNormSum*>(stale_sums.data);
  gemv.norm.stale_sum_count = static_cast<int>(stale_sums.numel() / words);
  launch_folded_gemv(op, gemv);
}

void CudaBackend::linear_folded_norm_input(const Tensor& x, const Tensor& weight, const Tensor& block_scale,
                                           const Tensor& bias, const FoldedNormInput& input_norm, Tensor& out) {
  make_current();
  const char* op = "linear_folded_norm_input";
  require_dtype(out, DType::BF16, op, "out");
  cuda::GemvArgs gemv = checked_gemv_args(op, x, weight, block_scale, bias, out);
  attach_folded_norm_input(op, input_norm, gemv);
  launch_folded_gemv(op, gemv);
}

void CudaBackend::gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) {
  make_current();
  require_dtype(rows, DType::I32, "gather_rows", "rows");
  require(out.dtype == x.dtype && out.numel() == rows.numel() * x.row_elems(), "gather_rows",
          "out " + out.shape_string() + " must be " + std::to_string(rows.numel()) + " rows of x " + x.shape_string());
  cuda::launch_gather_rows(x.data, rows.as<int>(), out.data, static_cast<int>(rows.numel()),
                           static_cast<size_t>(x.row_elems()) * dtype_size(x.dtype), stream_);
}

// One strided copy per chunk: the copy engine moves it at full bandwidth, and it is captured in graphs.
void CudaBackend::concat_column_chunks(const Tensor& parts, Tensor& out) {
  make_current();
  require_dtype(parts, DType::F32, "concat_column_chunks", "parts");
  require_dtype(out, DType::F32, "concat_column_chunks", "out");
  require(parts.ndim == 3 && out.ndim == 2 && parts.dim(1) == out.dim(0) && out.dim(1) <= parts.dim(0) * parts.dim(2),
          "concat_column_chunks", "parts " + parts.shape_string() + " do not fill out " + out.shape_string());
  const int64_t P = parts.dim(0), R = parts.dim(1), C = parts.dim(2), N = out.dim(1);
  if (R == 0) return;
  for (int64_t p = 0; p < P && p * C < N; ++p) {
    const int64_t width = std::min(C, N - p * C);
    NANOVLLM_CUDA_CHECK(cudaMemcpy2DAsync(out.as<float>() + p * C, N * sizeof(float),
                                          parts.as<const float>() + p * R * C, C * sizeof(float), width * sizeof(float),
                                          R, cudaMemcpyDeviceToDevice, stream_));
  }
}

void CudaBackend::set_logits(Tensor& logits, const Tensor& rows, const Tensor& tokens, float value) {
  make_current();
  require_dtype(logits, DType::F32, "set_logits", "logits");
  require_dtype(rows, DType::I32, "set_logits", "rows");
  require_dtype(tokens, DType::I32, "set_logits", "tokens");
  require(logits.ndim == 2 && rows.numel() == tokens.numel(), "set_logits",
          "logits must be [R, V], rows and tokens of one length");
  cuda::launch_set_logits(logits.as<float>(), logits.dim(1), rows.as<int>(), tokens.as<int>(),
                          static_cast<int>(rows.numel()), value, stream_);
}

// What sample() and sample_shard() check alike: logits F32 [R, C], token ids I32 [R] (named token_name in
// errors), and the inputs of the noise (temperature, seed, step) for at least R rows.
void CudaBackend::check_sampler_inputs(const char* op, const Tensor& logits, const SamplerInputs& in,
                                       const Tensor& token_ids, const char* token_name) const {
  require_dtype(logits, DType::F32, op, "logits");
  require_dtype(token_ids, DType::I32, op, token_name);
  require_dtype(in.temperature, DType::F32, op, "temperature");
  require_dtype(in.seed, DType::I64, op, "seed");
  require_dtype(in.step, DType::I32, op, "step");
  require(logits.ndim == 2, op, "logits " + logits.shape_string() + " must be [R, C]");
  const int64_t rows = logits.dim(0);
  require(
      token_ids.numel() == rows && in.temperature.numel() >= rows && in.seed.numel() >= rows && in.step.numel() >= rows,
      op,
      "logits " + logits.shape_string() + ", " + token_name + " " + token_ids.shape_string() +
          " and the sampler inputs disagree on the row count");
  require(reserved_, op, "reserve() must be called first (it sizes the sampler workspace)");
}

cuda::SamplerArgs CudaBackend::sample_args(const Tensor& logits, const SamplerInputs& in, Tensor& token_ids) {
  cuda::SamplerArgs args;
  args.logits = logits.as<float>();
  args.temperature = in.temperature.as<float>();
  args.top_k = in.top_k.as<int>();
  args.top_p = in.top_p.as<float>();
  args.min_p = in.min_p.as<float>();
  args.seed = in.seed.as<int64_t>();
  args.step = in.step.as<int>();
  args.token_ids = token_ids.as<int>();
  args.rows = static_cast<int>(logits.dim(0));
  args.vocab = static_cast<int>(logits.dim(1));
  args.any_top_k_or_top_p = in.any_top_k_or_top_p;
  return args;
}

// Shard mode (see SamplerArgs): columns [0, valid) of rows logits.dim(1) apart; top_k, top_p, min_p unread.
cuda::SamplerArgs CudaBackend::sample_shard_args(const Tensor& logits, int64_t vocab_start, int64_t valid,
                                                 const SamplerInputs& in, Tensor& best_key, Tensor& best_token) {
  cuda::SamplerArgs args;
  args.logits = logits.as<float>();
  args.temperature = in.temperature.as<float>();
  args.seed = in.seed.as<int64_t>();
  args.step = in.step.as<int>();
  args.token_ids = best_token.as<int>();
  args.rows = static_cast<int>(logits.dim(0));
  args.vocab = static_cast<int>(valid);
  args.row_stride = logits.dim(1);
  args.best_key = best_key.as<float>();
  args.token_offset = static_cast<int>(vocab_start);
  return args;
}

void CudaBackend::sample(const Tensor& logits, const SamplerInputs& in, Tensor& token_ids) {
  make_current();
  const char* op = "sample";
  check_sampler_inputs(op, logits, in, token_ids, "token_ids");
  require_dtype(in.top_k, DType::I32, op, "top_k");
  require_dtype(in.top_p, DType::F32, op, "top_p");
  require_dtype(in.min_p, DType::F32, op, "min_p");
  const int64_t rows = logits.dim(0);
  require(in.top_k.numel() >= rows && in.top_p.numel() >= rows && in.min_p.numel() >= rows, op,
          "logits " + logits.shape_string() + " and the sampler inputs disagree on the row count");
  cuda::launch_sample(sample_args(logits, in, token_ids), sampler_workspace_.data(), sampler_workspace_.bytes(),
                      stream_);
}

// sample()'s fast path in shard mode (see SamplerArgs): the same kernels, the same workspace (a shard has
// at most vocab_size columns), so it is capturable and allocates nothing.
void CudaBackend::sample_shard(const Tensor& logits, int64_t vocab_start, int64_t valid, const SamplerInputs& in,
                               Tensor& best_key, Tensor& best_token) {
  make_current();
  const char* op = "sample_shard";
  check_sampler_inputs(op, logits, in, best_token, "best_token");
  require_dtype(best_key, DType::F32, op, "best_key");
  const int64_t cols = logits.dim(1);
  require(valid >= 0 && valid <= cols, op,
          "valid " + std::to_string(valid) + " outside [0, " + std::to_string(cols) + "] for logits " +
              logits.shape_string());
  require(vocab_start >= 0 && vocab_start + valid <= INT32_MAX, op,
          "vocab_start " + std::to_string(vocab_start) + " with " + std::to_string(valid) +
              " tokens is outside the I32 token ids");
  require(
      best_key.numel() == logits.dim(0), op,
      "best_key " + best_key.shape_string() + " does not have one entry per row of logits " + logits.shape_string());
  cuda::launch_sample(sample_shard_args(logits, vocab_start, valid, in, best_key, best_token),
                      sampler_workspace_.data(), sampler_workspace_.bytes(), stream_);
}

void CudaBackend::logprobs(const Tensor& logits, const Tensor& targets, int k, Tensor& target_logprob, Tensor& top_ids,
                           Tensor& top_logprobs) {
  make_current();
  const char* op = "logprobs";
  require_dtype(logits, DType::F32, op, "logits");
  require_dtype(targets, DType::I32, op, "targets");
  require_dtype(target_logprob, DType::F32, op, "target_logprob");
  const int64_t rows = logits.dim(0);
  require(logits.ndim == 2 && targets.numel() == rows && target_logprob.numel() == rows, op,
          "logits " + logits.shape_string() + ", targets " + targets.shape_string() + ", target_logprob " +
              target_logprob.shape_string());
  if (k > 0) {
    require_dtype(top_ids, DType::I32, op, "top_ids");
    require_dtype(top_logprobs, DType::F32, op, "top_logprobs");
    require(top_ids.numel() == rows * k && top_logprobs.numel() == rows * k, op,
            "top_ids / top_logprobs must be [R, k]");
  }
  cuda::launch_logprobs(logits.as<float>(), targets.as<int>(), static_cast<int>(rows), static_cast<int>(logits.dim(1)),
                        k, target_logprob.as<float>(), k > 0 ? top_ids.as<int>() : nullptr,
                        k > 0 ? top_logprobs.as<float>() : nullptr, stream_);
}

CudaGraph CudaBackend::capture(const std::function<void()>& enqueue) {
  make_current();
  NANOVLLM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);  // leave the stream usable
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  NANOVLLM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  NANOVLLM_CUDA_CHECK(err);
  return CudaGraph(exec);
}

void CudaBackend::replay(const CudaGraph& graph) {
  make_current();
  require(!graph.empty(), "replay", "the graph is empty");
  NANOVLLM_CUDA_CHECK(cudaGraphLaunch(graph.get(), stream_));
}

namespace {
class CudaOpGraph final : public OpGraph {
 public:
  CudaOpGraph(CudaBackend& backend, CudaGraph graph) : backend_(backend), graph_(std::move(graph)) {}
  void replay() override { backend_.replay(graph_); }

 private:
  CudaBackend& backend_;
  CudaGraph graph_;
};
}  // namespace

std::unique_ptr<OpGraph> CudaBackend::capture_graph(const std::function<void()>& enqueue) {
  return std::make_unique<CudaOpGraph>(*this, capture(enqueue));
}

double CudaBackend::measure_read_bandwidth_gbs(size_t bytes) {
  make_current();
  bytes = bytes / 16 * 16;
  require(bytes > 0, "measure_read_bandwidth_gbs", "needs at least 16 bytes");
  Buffer data = allocate(bytes);
  const int blocks = props_.multiProcessorCount * 4;
  Buffer sink = allocate(static_cast<size_t>(blocks) * sizeof(unsigned));
  NANOVLLM_CUDA_CHECK(cudaMemsetAsync(data.data(), 0x5a, bytes, stream_));
  const float ms = cuda::median_call_ms(
      [&] { cuda::launch_read_only(data.data(), bytes, static_cast<unsigned*>(sink.data()), blocks, stream_); },
      stream_, 3, 15);
  const double seconds = ms * 1e-3;
  return static_cast<double>(bytes) / seconds / 1e9;
}

}  // namespace nanovllm
