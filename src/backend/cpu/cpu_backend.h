#pragma once
// The fp32 CPU backend: every op of backend.h in plain fp32 (GEMMs through OpenBLAS, the rest OpenMP loops).
// It is the numerical reference the CUDA kernels are tested against, so each op is written to be obviously
// right first; it is also the no-GPU product path, so the hot ones (linear, attention) are reasonably fast.
#include "backend/backend.h"

namespace nanovllm {

class CpuBackend final : public Backend {
 public:
  // Uses OpenMP's default thread count (OMP_NUM_THREADS or the cores).
  CpuBackend();
  // num_threads > 0 caps the OpenMP loops of this backend and sets OpenBLAS's (process-wide) thread count;
  // num_threads <= 0 behaves as the default constructor.
  explicit CpuBackend(int num_threads);

  int num_threads() const { return num_threads_; }

  std::string name() const override { return "cpu"; }
  DType compute_dtype() const override { return DType::F32; }
  Buffer allocate(size_t bytes) override;
  void upload(const void* host, void* dst, size_t bytes) override;
  Buffer allocate_host(size_t bytes) override { return allocate(bytes); }
  void upload_async(const void* host, void* dst, size_t bytes) override { upload(host, dst, bytes); }
  void download(const void* src, void* host, size_t bytes) override;
  void download_async(const void* src, void* host, size_t bytes) override { download(src, host, bytes); }
  void upload_ranges(const void* host, void* dst, std::span<const CopyRange> ranges,
                     const DeviceIdSource& from) override;
  std::unique_ptr<QueueMark> create_mark() override;
  void synchronize() override {}  // every op has finished when it returns
  void upload_converted(const void* host_src, DType src_dtype, void* dst, int64_t numel) override;
  bool is_device() const override { return false; }
  std::string device_name() const override { return "cpu"; }

  void embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override;
  void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out) override;
  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) override;
  void linear_fp8(const Tensor& x, const Tensor& weight, const Tensor& block_scale, const Tensor& bias,
                  Tensor& out) override;
  bool supports_fp8_weights() const override { return true; }
  void qk_norm_rope_cache(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                          const Tensor& positions, const Tensor& rope, const Tensor& slot_mapping, int num_heads,
                          int num_kv_heads, int head_dim, KvCacheLayer& cache, Tensor& q_out) override;
  void paged_attention(const Tensor& q, const KvCacheLayer& cache, const AttentionBatch& batch, int num_heads,
                       int num_kv_heads, int head_dim, float scale, Tensor& out) override;
  void silu_and_mul(const Tensor& gate_up, Tensor& out) override;
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) override;
  void concat_column_chunks(const Tensor& parts, Tensor& out) override;
  void set_logits(Tensor& logits, const Tensor& rows, const Tensor& tokens, float value) override;
  void sample(const Tensor& logits, const SamplerInputs& in, Tensor& token_ids) override;
  void sample_shard(const Tensor& logits, int64_t vocab_start, int64_t valid, const SamplerInputs& in, Tensor& best_key,
                    Tensor& best_token) override;
  void logprobs(const Tensor& logits, const Tensor& targets, int k, Tensor& target_logprob, Tensor& top_ids,
                Tensor& top_logprobs) override;

 private:
  int num_threads_;
};

}  // namespace nanovllm
