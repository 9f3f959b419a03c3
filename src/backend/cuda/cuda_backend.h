#pragma once
// The bf16 CUDA backend: every op of backend.h on one CUDA stream of one device. Activations and weights are
// bf16 (linear weights may be block-scaled FP8), the KV cache bf16 or FP8, math is fp32; logits are fp32. reserve()
// allocates every workspace once (attention's split-KV partials, the sampler's scratch; the cuBLASLt workspace comes
// with the constructor), so no op allocates and any sequence of ops can be captured into a CUDA graph and replayed.
#include <cuda_runtime.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_graph.h"

namespace nanovllm::cuda {
struct SamplerArgs;
}

namespace nanovllm {

namespace cuda {
class Gemm;
class Fp8BlockGemm;
struct GemvArgs;
}  // namespace cuda

// How linear_fp8 multiplies: the GEMV up to 16 rows; above, either the weight dequantised to bf16 for cuBLASLt's
// bf16 GEMM (kDequantize) or the activations quantised per token and 128-wide group for cuBLASLt's block-scaled
// FP8 GEMM (kBlockScaled; W8A8). kAuto, the default setting, takes the block-scaled GEMM for weights of at least
// kBlockScaledMinWeight elements and dequantises smaller ones (on an H200 the block-scaled GEMM was up to 1.4x
// slower than dequantising Qwen3-0.6B's o_proj and down, 2-3 M elements, below 2,048 rows, and 1.0-3.8x faster
// on every projection of 4 M elements and more). The environment variable NANOVLLM_FP8_GEMM=auto|dequant|block picks
// every backend's initial setting; shapes the FP8 GEMM refuses take the dequantise path.
enum class Fp8LinearPath { kGemv, kDequantize, kBlockScaled, kAuto };
inline constexpr int64_t kBlockScaledMinWeight = int64_t{4} << 20;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_index = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // --- Backend ---
  void reserve(const BackendLimits& limits) override;
  std::string name() const override { return "cuda:" + device_name(); }
  DType compute_dtype() const override { return DType::BF16; }
  Buffer allocate(size_t bytes) override;  // cudaMalloc; 256-byte aligned
  // Synchronous: returns when the copy is done (host may be pageable); ordered after earlier ops.
  void upload(const void* host, void* dst, size_t bytes) override;
  Buffer allocate_host(size_t bytes) override;  // page-locked
  void upload_async(const void* host, void* dst, size_t bytes) override;
  void download(const void* src, void* host, size_t bytes) override;
  // The host side must be pinned (allocate_host) and stay alive until a later mark's wait() or synchronize().
  void download_async(const void* src, void* pinned_dst, size_t bytes) override;
  // One kernel that reads the pinned area over the bus (pinned memory is mapped at the same address under unified
  // addressing).
  void upload_ranges(const void* host, void* dst, std::span<const CopyRange> ranges,
                     const DeviceIdSource& from) override;
  std::unique_ptr<QueueMark> create_mark() override;
  void synchronize() override;
  void upload_converted(const void* host_src, DType src_dtype, void* dst, int64_t numel) override;
  bool is_device() const override { return true; }
  std::string device_name() const override;
  MemoryInfo memory_info() const override;
  // Median of several timed passes.
  double measure_read_bandwidth_gbs(size_t bytes) override;
  bool can_capture_graphs() const override { return true; }
  // capture() as an OpGraph whose replay() is replay().
  std::unique_ptr<OpGraph> capture_graph(const std::function<void()>& enqueue) override;

  void embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override;
  void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out) override;
  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) override;
  // Up to 16 rows: the GEMV reads the FP8 codes directly. More: fp8_gemm_path() (see Fp8LinearPath); the
  // dequantised weight goes to a scratch buffer sized by reserve_fp8_linear, the quantised activations to one
  // sized by reserve() and reserve_fp8_linear while the block-scaled path is selected.
  void linear_fp8(const Tensor& x, const Tensor& weight, const Tensor& block_scale, const Tensor& bias,
                  Tensor& out) override;
  bool supports_fp8_weights() const override { return true; }
  void reserve_fp8_linear(int64_t n, int64_t k) override;
  // Weights of at least twice the L2 cache: the GEMV against cuBLASLt at 1-32 rows (Gemm::measure_small_row_paths);
  // a smaller weight would be timed from the L2 cache, not as a decode step reads it.
  void tune_linear(const Tensor& weight, DType out_dtype) override;
  // Scales whose rows cuBLASLt wants padded (ceil(K / 128) % 4 != 0) get a padded copy here, used by the
  // block-scaled path; a scale tensor linear_fp8 meets without one takes the dequantise path.
  void prepare_fp8_linear(const Tensor& weight, const Tensor& block_scale) override;
  void qk_norm_rope_cache(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                          const Tensor& positions, const Tensor& rope, const Tensor& slot_mapping, int num_heads,
                          int num_kv_heads, int head_dim, KvCacheLayer& cache, Tensor& q_out) override;
  void paged_attention(const Tensor& q, const KvCacheLayer& cache, const AttentionBatch& batch, int num_heads,
                       int num_kv_heads, int head_dim, float scale, Tensor& out) override;
  void silu_and_mul(const Tensor& gate_up, Tensor& out) override;
  bool linear_silu_and_mul(const Tensor& x, const Tensor& weight, const Tensor& block_scale,
                           const FoldedNormInput& input_norm, Tensor& out) override;
  // The GEMV's folded norm: up to 16 rows of at most cuda::kGemvMaxNormWidth, 32 where the weights are bf16 and
  // under cuda::kGemvMaxWideWeight elements.
  bool supports_norm_fold(int64_t tokens, int64_t hidden, DType weight_dtype,
                          int64_t largest_weight_elements) const override;
  int64_t folded_norm_sum_words() const override;
  void linear_add_folded_norm(const Tensor& x, const Tensor& weight, const Tensor& block_scale, Tensor& residual,
                              const Tensor& norm_weight, Tensor& sums, Tensor& stale_sums, Tensor& out) override;
  void linear_folded_norm_input(const Tensor& x, const Tensor& weight, const Tensor& block_scale, const Tensor& bias,
                                const FoldedNormInput& input_norm, Tensor& out) override;
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) override;
  void concat_column_chunks(const Tensor& parts, Tensor& out) override;
  void set_logits(Tensor& logits, const Tensor& rows, const Tensor& tokens, float value) override;
  void sample(const Tensor& logits, const SamplerInputs& in, Tensor& token_ids) override;
  void sample_shard(const Tensor& logits, int64_t vocab_start, int64_t valid, const SamplerInputs& in, Tensor& best_key,
                    Tensor& best_token) override;
  void logprobs(const Tensor& logits, const Tensor& targets, int k, Tensor& target_logprob, Tensor& top_ids,
                Tensor& top_logprobs) override;

  // --- CUDA-specific: the device and stream NCCL joins, and what the CUDA tests and benches drive directly ---
  int device_index() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  size_t bytes_allocated() const;  // live bytes from allocate() of this backend
  // Captures everything `enqueue` puts on the stream (no synchronising calls inside) and instantiates it.
  CudaGraph capture(const std::function<void()>& enqueue);
  void replay(const CudaGraph& graph);

  // The path linear_fp8 takes above 16 rows: kAuto, kDequantize or kBlockScaled. Selecting kAuto or kBlockScaled
  // allocates the activation scratch for the FP8 linears reserved so far (so select it before capturing graphs).
  void set_fp8_gemm_path(Fp8LinearPath path);
  Fp8LinearPath fp8_gemm_path() const { return fp8_gemm_path_; }
  // The path the last linear_fp8 call took (tests check that the path they meant to cover ran).
  Fp8LinearPath last_fp8_linear_path() const { return last_fp8_linear_path_; }

  // The kernel arguments sample() and sample_shard() launch with, unchecked (the two check first); tests
  // that drive one sampler path explicitly (cuda::launch_sample_via) build theirs with these.
  static cuda::SamplerArgs sample_args(const Tensor& logits, const SamplerInputs& in, Tensor& token_ids);
  static cuda::SamplerArgs sample_shard_args(const Tensor& logits, int64_t vocab_start, int64_t valid,
                                             const SamplerInputs& in, Tensor& best_key, Tensor& best_token);

 private:
  // What sample() and sample_shard() check alike (see the .cpp).
  void check_sampler_inputs(const char* op, const Tensor& logits, const SamplerInputs& in, const Tensor& token_ids,
                            const char* token_name) const;
  void make_current() const;
  class StreamMark;  // create_mark()'s QueueMark: a CUDA event on stream_
  // (Re)allocates the activation scratch of the block-scaled FP8 path for max_num_tokens rows of the widest K.
  void reserve_fp8_activations();
  // The shadow an FP8 cache's long-prompt prefill runs through (none for a bf16 cache or other GPUs).
  void reserve_fp8_prefill_shadow(const BackendLimits& limits);
  // Prefill attention (no decode rows), through the FP8 shadow where it applies and fits.
  void run_prefill_attention(const cuda::PagedAttentionArgs& args);
  // linear_fp8 above 16 rows on the block-scaled FP8 GEMM (rows past the last multiple of 4 on the GEMV `whole`
  // describes for all rows); false, with at most the activation scratch written, where it does not apply.
  bool block_scaled_linear_fp8(const Tensor& x, const Tensor& weight, const Tensor& block_scale, const Tensor& bias,
                               Tensor& out, const cuda::GemvArgs& whole);
  // The GEMV's arguments for x . weight^T (+ bias) into out, checked as linear() checks them; weight bf16, or FP8
  // codes when block_scale is not empty.
  static cuda::GemvArgs checked_gemv_args(const char* op, const Tensor& x, const Tensor& weight,
                                          const Tensor& block_scale, const Tensor& bias, const Tensor& out);
  // Checks input_norm's sums against the call's rows and points the GEMV at them.
  void attach_folded_norm_input(const char* op, const FoldedNormInput& input_norm, cuda::GemvArgs& gemv) const;
  // Throws unless sums is an I64 [rows, folded_norm_sum_words()] tensor, 16-byte aligned.
  void require_norm_sums(const Tensor& sums, int64_t rows, const char* op, const char* what) const;
  // Launches a folded-norm GEMV; a call supports_norm_fold() promised but the GEMV refuses is an engine error.
  void launch_folded_gemv(const char* op, const cuda::GemvArgs& gemv);

  int device_ = 0;
  std::shared_ptr<std::atomic<size_t>> live_bytes_ =
      std::make_shared<std::atomic<size_t>>(0);  // allocate()d, not freed
  cudaDeviceProp props_{};
  cuda::PrefillKernel prefill_kernel_ = cuda::PrefillKernel::kMmaSync;  // chosen once, for this device
  cudaStream_t stream_ = nullptr;
  Buffer gemm_workspace_;
  std::unique_ptr<cuda::Gemm> gemm_;
  BackendLimits limits_{};
  bool reserved_ = false;
  Buffer attention_workspace_;
  // The bf16 shadow of an FP8 cache's blocks for long-prompt prefill (cuda::paged_attention_prefill): room for
  // kFp8PrefillShadowSequences sequences of max_model_len keys (a step's long prompts, with chunked prefill
  // rarely more than two), at most kMaxFp8PrefillShadowBytes (2 GiB: 512k keys of 8 KV heads of 128, K and V).
  Buffer fp8_prefill_shadow_;
  static constexpr int kFp8PrefillShadowSequences = 4;
  static constexpr size_t kMaxFp8PrefillShadowBytes = size_t{2} << 30;
  // Where the shadow applies, multiply in E4M3 (kWgmmaFp8Mma) instead of bf16: NANOVLLM_FP8_ATTENTION=fp8.
  bool fp8_attention_products_ = false;
  bool skinny_norm_fold_ = false;  // NANOVLLM_SKINNY_FOLD=1: supports_norm_fold reaches the skinny GEMM's rows
  // Decode attention's key loop: NANOVLLM_DECODE_ATTENTION=auto (default) | cores | mma, for A/B runs.
  cuda::DecodeKernel decode_kernel_ = cuda::DecodeKernel::kAuto;
  Buffer sampler_workspace_;
  Buffer fp8_weight_scratch_;  // bf16, the largest FP8 weight reserved
  std::unique_ptr<cuda::Fp8BlockGemm> fp8_gemm_;
  Fp8LinearPath fp8_gemm_path_ = Fp8LinearPath::kAuto;
  Fp8LinearPath last_fp8_linear_path_ = Fp8LinearPath::kGemv;
  int64_t fp8_max_k_ = 0;            // the widest FP8 linear reserved
  int64_t fp8_activation_rows_ = 0;  // rows the activation scratch holds
  int64_t fp8_activation_k_ = 0;     // and the K it holds them for
  Buffer fp8_activation_codes_;      // E4M3 [rows, K]
  Buffer fp8_activation_scales_;     // F32 [ceil(K / 128), rows]
  struct PaddedScales {
    Buffer scales;  // [ceil(n / 128), round_up(ceil(k / 128), 4)]
    int64_t n = 0, k = 0;
  };
  std::map<const void*, PaddedScales> padded_fp8_scales_;  // by the block_scale tensor's address
  std::set<std::pair<int, int>> fp8_fallback_shapes_;      // (N, K) the block-scaled path fell back on
};

}  // namespace nanovllm
