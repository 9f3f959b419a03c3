#pragma once
// Host-side launchers of the backend's own kernels (one .cu each); CudaBackend validates shapes and calls
// these. Pointers are device memory; everything is enqueued on `stream` and nothing allocates, so every
// launcher may be captured into a CUDA graph.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace nanovllm::cuda {

// embedding.cu: out[t, :] = table[ids[t] - vocab_start, :], zeros where that row is outside [0, table_rows);
// hidden % 8 == 0.
void launch_embedding(const int* ids, const __nv_bfloat16* table, __nv_bfloat16* out, int num_tokens, int hidden,
                      int64_t vocab_start, int64_t table_rows, cudaStream_t stream);

// norm.cu: out = x / rms(x) * weight per row; hidden % 8 == 0, hidden <= kMaxNormHidden. In-place is allowed.
inline constexpr int kMaxNormHidden = 16384;
void launch_rms_norm(const __nv_bfloat16* x, const __nv_bfloat16* weight, float eps, __nv_bfloat16* out, int rows,
                     int hidden, cudaStream_t stream);
// residual += x (rounded to bf16); out = rms_norm(residual) * weight. out may alias x.
void launch_add_rms_norm(const __nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight, float eps,
                         __nv_bfloat16* out, int rows, int hidden, cudaStream_t stream);

// rope_kv.cu: per-head RMSNorm (q_norm / k_norm may be null) + NeoX RoPE of q and k, q to q_out, k and v
// to cache slot slot_mapping[t] (-1 = skip). head_dim in {64, 128, 256}. positions and slot_mapping are read
// before the stream's previous kernel has completed (programmatic launch): they must be written by a copy or by a
// kernel that does not let its dependents start early.
struct QkNormRopeCacheArgs {
  const __nv_bfloat16* qkv = nullptr;     // [T, (nh + 2 nkv) d]
  const __nv_bfloat16* q_norm = nullptr;  // [d] or null
  const __nv_bfloat16* k_norm = nullptr;  // [d] or null
  const int* positions = nullptr;         // [T]
  const float* rope = nullptr;            // [max_pos, d]: cos | sin
  const int* slot_mapping = nullptr;      // [T]
  void* k_cache = nullptr;                // [slots, nkv, d], bf16, or FP8 codes of value / scale
  void* v_cache = nullptr;
  bool fp8_cache = false;
  float k_scale = 1.0f;  // FP8 only
  float v_scale = 1.0f;
  __nv_bfloat16* q_out = nullptr;  // [T, nh d]
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float eps = 1e-6f;
};
void launch_qk_norm_rope_cache(const QkNormRopeCacheArgs& args, cudaStream_t stream);

// activation.cu: out [T, I] = silu(gate_up[:, :I]) * gate_up[:, I:]; inter % 8 == 0.
void launch_silu_and_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int num_tokens, int inter,
                         cudaStream_t stream);

// set_logits.cu: logits[rows[i] * vocab + tokens[i]] = value for i < n.
void launch_set_logits(float* logits, int64_t vocab, const int* rows, const int* tokens, int n, float value,
                       cudaStream_t stream);

// fp8_dequant.cu: out [n, k] bf16 = codes [n, k] (E4M3) * block_scale [ceil(n / 128), ceil(k / 128)] (F32),
// element (i, j) scaled by block (i / 128, j / 128); k % 8 == 0, codes 8-byte and out 16-byte aligned.
void launch_dequantize_fp8_weight(const uint8_t* codes, const float* block_scale, __nv_bfloat16* out, int n, int k,
                                  cudaStream_t stream);

// fp8_act_quant.cu: dynamic FP8 quantisation of x [m, k] bf16 per token and 128-wide K group
// (common/fp8_activation.h): codes [m, k] E4M3 and scales [ceil(k / 128), m] F32 (group-major: the order
// cuBLASLt's VEC128_32F reads, fp8_block_gemm.h). k % 16 == 0; x 16-byte, codes 8-byte aligned.
void launch_quantize_fp8_activations(const __nv_bfloat16* x, uint8_t* codes, float* scales, int m, int k,
                                     cudaStream_t stream);

// gather.cu: out[r] = x[rows[r]] for rows of row_bytes bytes each (any dtype).
void launch_gather_rows(const void* x, const int* rows, void* out, int num_rows, size_t row_bytes, cudaStream_t stream);

// gemm epilogue helper (bias_add.cu): out[t, n] += bias[n] for an fp32 out.
void launch_add_bias_f32(float* out, const __nv_bfloat16* bias, int rows, int cols, cudaStream_t stream);

// convert.cu: bf16 device copy of numel fp32 elements (used by tests and uploads staged on the device).
void launch_f32_to_bf16(const float* src, __nv_bfloat16* dst, int64_t numel, cudaStream_t stream);

// sampler.cu
struct SamplerArgs {
  const float* logits = nullptr;  // [R, row_stride]: columns [0, vocab) of each row are sampled
  const float* temperature = nullptr;
  const int* top_k = nullptr;
  const float* top_p = nullptr;
  const float* min_p = nullptr;
  const int64_t* seed = nullptr;
  const int* step = nullptr;
  int* token_ids = nullptr;  // [R]
  int rows = 0;
  int vocab = 0;
  int64_t row_stride = 0;  // floats from one row to the next; 0 = vocab
  // Shard mode (Backend::sample_shard) when best_key is set: the columns are the tokens token_offset + i,
  // whose global id the noise is drawn for; top_k, top_p and min_p are ignored, and per row the shard's
  // winner is written as best_key[r] (its key) and token_ids[r] = token_offset + i, or -inf and INT_MAX when
  // nothing in the shard has probability (sample()'s greedy fallback is the caller's).
  float* best_key = nullptr;  // [R]
  int token_offset = 0;
  bool any_top_k_or_top_p = true;  // SamplerInputs's: false, no row takes the filtered path (not launched)
};
// Scratch (bytes) of the fast path for up to max_rows rows of vocab logits.
size_t sampler_workspace_bytes(int max_rows, int vocab);
void launch_sample(const SamplerArgs& args, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// logprobs.cu: k <= kMaxLogprobsK.
inline constexpr int kMaxLogprobsK = 256;
void launch_logprobs(const float* logits, const int* targets, int rows, int vocab, int k, float* target_logprob,
                     int* top_ids, float* top_logprobs, cudaStream_t stream);

// upload_ranges.cu: ranges of a pinned host area (mapped at the same address) to the same offsets of dst; in range
// ids_range a word holding -1 - r becomes ids[r] when ids is set.
inline constexpr int kMaxUploadRangesArgs = 16;
struct UploadRangesArgs {
  const char* host = nullptr;
  char* dst = nullptr;
  int num_ranges = 0;
  size_t offset[kMaxUploadRangesArgs] = {};
  uint32_t words[kMaxUploadRangesArgs] = {};  // 4-byte words of each range
  int ids_range = -1;
  const int32_t* ids = nullptr;
};
void launch_upload_ranges(const UploadRangesArgs& args, cudaStream_t stream);

// bandwidth.cu: reads `bytes` (a multiple of 16) of src once; writes one word per block to sink.
void launch_read_only(const void* src, size_t bytes, unsigned* sink, int blocks, cudaStream_t stream);

}  // namespace nanovllm::cuda
