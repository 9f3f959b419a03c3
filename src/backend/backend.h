#pragma once
// The small op set the Qwen3 model is written over. Two implementations: cpu/ (fp32, the numerical reference)
// and cuda/ (bf16). Every tensor passed in lives in this backend's memory; activations and weights are in
// compute_dtype() unless a comment says otherwise; index tensors are I32. Shapes: T tokens of the step,
// H hidden size, nh / nkv query / KV heads, d head_dim, I intermediate size, V vocab, R logits rows.
// Ops are enqueued in order (the CUDA backend on one stream); call synchronize() before reading results.
// Outputs never alias inputs except where an op says so (rms_norm/add_rms_norm: out may be x).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include "common/error.h"
#include "common/tensor.h"

namespace nanovllm {

// Which tokens attend to what, for one step. Sequence s owns query rows [cu_seqlens_q[s], cu_seqlens_q[s+1])
// and has seq_lens_k[s] tokens in the cache after this step's K/V were written. Its query row i (0-based
// within the sequence) is at position seq_lens_k[s] - q_len + i and attends causally to keys [0, that position].
// Key j of sequence s lives in cache block block_tables[s * max_blocks_per_seq + j / block_size], offset
// j % block_size. Entries past a sequence's blocks are -1.
struct AttentionBatch {
  Tensor cu_seqlens_q;  // I32 [num_seqs + 1]
  Tensor seq_lens_k;    // I32 [num_seqs]
  Tensor block_tables;  // I32 [num_seqs, max_blocks_per_seq]
  int num_seqs = 0;
  int max_seqlen_q = 0;  // upper bounds, for grid sizing
  int max_seqlen_k = 0;
  int max_blocks_per_seq = 0;
  int block_size = 0;
  bool decode_only = false;  // every sequence has exactly one query row
  // A mixed step: sequences [0, num_decode_rows) have one query row each and come before the prompt chunks, so
  // a backend may run them as decode rows (0 otherwise; every row is still covered by the general contract).
  int num_decode_rows = 0;
};

// The paged cache of one layer: [num_blocks, block_size, nkv, d] for K and for V, both in compute_dtype() or
// both in F8_E4M3 (an FP8 cache, half the bytes of bf16). In FP8 a cached value is its code times the layer's
// scale, and a value is written as fp8(value / scale), rounded to nearest even and saturated at +-448
// (common/fp8.h); the scales are ignored otherwise.
struct KvCacheLayer {
  Tensor k;
  Tensor v;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  bool is_fp8() const { return k.dtype == DType::F8_E4M3; }
  // What is wrong with an FP8 cache's scales (they must be positive and finite), or "" (also for other caches).
  std::string scale_problem() const {
    const auto usable = [](float scale) { return std::isfinite(scale) && scale > 0.0f; };
    if (!is_fp8() || (usable(k_scale) && usable(v_scale))) return "";
    return "FP8 cache scales must be positive and finite, got k_scale " + std::to_string(k_scale) + " and v_scale " +
           std::to_string(v_scale);
  }
};

// Per-row sampling controls, one row per logits row that samples.
struct SamplerInputs {
  Tensor temperature;  // F32 [R]; 0 = greedy (argmax, lowest index on ties)
  Tensor top_k;        // I32 [R]; <= 0 = off
  Tensor top_p;        // F32 [R]; 1 = off
  Tensor min_p;        // F32 [R]; 0 = off
  Tensor seed;         // I64 [R]; the request's seed
  Tensor step;         // I32 [R]; position of the token being sampled (a fresh random stream per step)
  // False when the caller knows that no row has top_k or top_p on (uses_top_k_or_top_p): a backend may then skip
  // the work that serves such rows (on CUDA a kernel launch, on the chain between two decode steps).
  bool any_top_k_or_top_p = true;
};

// Whether a sampling row filters by top_k or top_p: only rows that sample (temperature above 0) do.
inline bool uses_top_k_or_top_p(float temperature, int32_t top_k, float top_p) {
  return temperature > 0.0f && (top_k > 0 || top_p < 1.0f);
}

// A byte range at the same offset of a host area and of a device buffer (Backend::upload_ranges).
struct CopyRange {
  size_t offset = 0;
  size_t bytes = 0;  // a multiple of 4
};

// Input ids that come from a device buffer rather than from the host (Backend::upload_ranges): in range
// `range`, an I32 word that holds -1 - r on the host is written as ids[r].
struct DeviceIdSource {
  int range = -1;
  const int32_t* ids = nullptr;  // null: no word is replaced
};

// The most ranges one Backend::upload_ranges call takes.
inline constexpr size_t kMaxUploadRanges = 16;

// What Backend::upload_ranges requires of its arguments; `op` names the caller in the error.
inline void check_upload_ranges(const std::string& op, std::span<const CopyRange> ranges, const DeviceIdSource& from) {
  if (ranges.size() > kMaxUploadRanges)
    throw EngineError(op + ": " + std::to_string(ranges.size()) + " ranges, at most " +
                      std::to_string(kMaxUploadRanges));
  for (const CopyRange& r : ranges) {
    if (r.offset % 16 != 0 || r.bytes % 4 != 0)
      throw EngineError(op + ": range at " + std::to_string(r.offset) + " of " + std::to_string(r.bytes) +
                        " bytes is not 16-byte aligned with whole words");
  }
  if (from.ids != nullptr && (from.range < 0 || from.range >= static_cast<int>(ranges.size())))
    throw EngineError(op + ": device ids for range " + std::to_string(from.range) + " of " +
                      std::to_string(ranges.size()));
}

// The largest step the runner will ever ask for; backends size their workspaces from it once, up front
// (no allocation may happen later: CUDA graphs replay fixed addresses).
struct BackendLimits {
  int max_num_tokens = 0;   // tokens of one step (max_num_batched_tokens)
  int max_num_seqs = 0;     // sequences of one step
  int max_model_len = 0;    // keys of one sequence
  int max_logits_rows = 0;  // rows reaching the lm_head in one step
  int num_heads = 0;        // query heads (of this rank)
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int kv_block_size = 0;      // keys of one KV-cache block
  bool fp8_kv_cache = false;  // the KV cache holds e4m3 codes
};

// Ops recorded once and replayed with one launch, over the buffers and shapes they were recorded with (a CUDA
// graph). Made by Backend::capture_graph.
// The input of a linear whose RMSNorm the linear before it left half done (Backend::linear_add_folded_norm):
// the residual's sums of squares, and the norm's eps. Empty sums: an ordinary input.
struct FoldedNormInput {
  Tensor sums;  // I64 [T, folded_norm_sum_words()], in the backend's own form
  float eps = 0.0f;
};

class OpGraph {
 public:
  virtual ~OpGraph() = default;
  virtual void replay() = 0;
};

// A point in a backend's queue of work (a CUDA event): record() marks everything enqueued so far, wait() returns
// once all of it has run (at once for a mark never recorded). Lets the host wait for one step's results while a
// later step is already queued.
class QueueMark {
 public:
  virtual ~QueueMark() = default;
  virtual void record() = 0;
  virtual void wait() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Called once before the first op; the CPU backend may ignore it.
  virtual void reserve(const BackendLimits& limits) { (void)limits; }

  virtual std::string name() const = 0;       // "cpu" or "cuda:<device name>"
  virtual DType compute_dtype() const = 0;    // F32 on cpu, BF16 on cuda
  virtual Buffer allocate(size_t bytes) = 0;  // uninitialised memory of this backend
  virtual void upload(const void* host, void* dst, size_t bytes) = 0;
  // Host memory that upload_async() copies from without staging (page-locked on CUDA).
  virtual Buffer allocate_host(size_t bytes) = 0;
  // Enqueues a copy from allocate_host() memory and returns at once: the host bytes must stay unchanged until
  // a later synchronize() or download() has returned.
  virtual void upload_async(const void* host, void* dst, size_t bytes) = 0;
  virtual void download(const void* src, void* host, size_t bytes) = 0;
  // Enqueues a copy into allocate_host() memory and returns at once: read the bytes after a QueueMark recorded
  // later has been waited for (or after synchronize()).
  virtual void download_async(const void* src, void* host, size_t bytes) = 0;
  // Enqueues the copy of `ranges` (at most kMaxUploadRanges, each 16-byte aligned) of the allocate_host() area
  // `host` to the same offsets of `dst` as one operation, with the words `from` names taken from the device, and
  // returns at once; the host bytes must stay unchanged as for upload_async(). A step's metadata in one go: on CUDA
  // one kernel reading the pinned area, where a copy a range (or one copy over the gaps) paid a copy engine's start
  // each.
  virtual void upload_ranges(const void* host, void* dst, std::span<const CopyRange> ranges,
                             const DeviceIdSource& from) = 0;
  virtual std::unique_ptr<QueueMark> create_mark() = 0;
  virtual void synchronize() = 0;
  // Copies numel host elements of src_dtype (F32, BF16 or F16) into dst, converting to compute_dtype().
  virtual void upload_converted(const void* host_src, DType src_dtype, void* dst, int64_t numel) = 0;

  // --- The device behind the ops: what the engine sizes its KV cache and sets up by, what the bench reports ---
  // Whether the ops run on an accelerator with memory of its own (CUDA) rather than in host memory (CPU).
  virtual bool is_device() const = 0;
  // The accelerator's name (e.g. "NVIDIA H100 80GB HBM3"), or "cpu".
  virtual std::string device_name() const = 0;
  struct MemoryInfo {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
  };
  // The accelerator's memory, free and in all; only where is_device().
  virtual MemoryInfo memory_info() const { throw EngineError(name() + " backend: no device memory to report"); }
  // Device-memory read bandwidth in GB/s (1e9 bytes/s), timed on a read-only kernel over a buffer of `bytes`
  // allocated for the measurement; only where is_device().
  virtual double measure_read_bandwidth_gbs(size_t bytes) {
    (void)bytes;
    throw EngineError(name() + " backend: no device memory to measure");
  }
  // Whether capture_graph() works here (CUDA graphs).
  virtual bool can_capture_graphs() const { return false; }
  // Records the ops `enqueue` issues on this backend (no synchronising call inside; run the same ops once
  // before, so that lazy set-up such as GEMM heuristics happens outside the recording); they are not run.
  // Only where can_capture_graphs().
  virtual std::unique_ptr<OpGraph> capture_graph(const std::function<void()>& enqueue) {
    (void)enqueue;
    throw EngineError(name() + " backend cannot capture graphs");
  }

  // out[t] = table[ids[t] - vocab_start] when that row exists, else zeros: table may hold only the rows
  // [vocab_start, vocab_start + rows) of a vocabulary-parallel rank. ids are range-checked by the engine.
  virtual void embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) = 0;
  // out = x / rms(x) * weight, per row; x [T, H].
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;
  // residual += x; out = rms_norm(residual) * weight. Fused because both are memory-bound.
  virtual void add_rms_norm(const Tensor& x, Tensor& residual, const Tensor& weight, float eps, Tensor& out) = 0;
  // out [T, N] = x [T, K] · weight [N, K]^T (+ bias [N] when not empty). out may be F32 with bf16 x/weight
  // (the lm_head's logits); otherwise out is compute_dtype().
  virtual void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) = 0;
  // linear() over a weight in Qwen's block-scaled FP8 (docs/fp8.md): weight F8_E4M3 [N, K], block_scale F32
  // [ceil(N / 128), ceil(K / 128)], and the weight's element (n, k) is fp8_e4m3_to_float(weight[n, k]) *
  // block_scale[n / 128, k / 128] (the block is kFp8BlockSize, fixed). x, bias and out as in linear(): out is
  // compute_dtype(). Only where supports_fp8_weights(); the model checks that before it loads FP8 weights.
  virtual void linear_fp8(const Tensor& x, const Tensor& weight, const Tensor& block_scale, const Tensor& bias,
                          Tensor& out) {
    (void)x, (void)weight, (void)block_scale, (void)bias, (void)out;
    throw EngineError(name() + " backend has no FP8 linear (linear_fp8)");
  }
  // Whether linear_fp8() works here.
  virtual bool supports_fp8_weights() const { return false; }
  // Called once per FP8 weight as it loads, before any op: a backend that needs scratch for linear_fp8() of an
  // [n, k] weight sizes it here (no allocation may happen later: CUDA graphs replay fixed addresses).
  virtual void reserve_fp8_linear(int64_t n, int64_t k) { (void)n, (void)k; }
  // Called once per FP8 weight after its codes and scales are written and before any op reads them: a backend
  // that wants the scales in another layout makes its copy here (it may allocate). The tensors must not change
  // afterwards.
  virtual void prepare_fp8_linear(const Tensor& weight, const Tensor& block_scale) { (void)weight, (void)block_scale; }
  // Called once at load for a large bf16 weight that linear() will multiply by few rows every decode step (the
  // lm_head), after it is written: a backend with more than one kernel for such calls may time them on it here
  // and keep the faster. out_dtype: the dtype linear() will write. It may synchronise; results stay within
  // linear()'s accuracy whichever kernel it keeps.
  virtual void tune_linear(const Tensor& weight, DType out_dtype) { (void)weight, (void)out_dtype; }
  // qkv [T, (nh + 2 nkv) d] is split into q, k, v; q and k get the per-head RMSNorm (when q_norm / k_norm
  // are not empty; Qwen2 has none) and rotary embedding (NeoX halves: x1 = x[:d/2], x2 = x[d/2:]) with
  // rope [max_pos, d] F32 holding cos in [:, :d/2] and sin in [:, d/2:]. q goes to q_out [T, nh d];
  // k and v go to cache slot slot_mapping[t] (block * block_size + offset; -1 = skip).
  virtual void qk_norm_rope_cache(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                                  const Tensor& positions, const Tensor& rope, const Tensor& slot_mapping,
                                  int num_heads, int num_kv_heads, int head_dim, KvCacheLayer& cache,
                                  Tensor& q_out) = 0;
  // Causal attention of q [T, nh d] over the paged cache; out [T, nh d]. GQA: query head h reads KV head
  // h / (nh / nkv).
  virtual void paged_attention(const Tensor& q, const KvCacheLayer& cache, const AttentionBatch& batch, int num_heads,
                               int num_kv_heads, int head_dim, float scale, Tensor& out) = 0;
  // out [T, I] = silu(gate_up[:, :I]) * gate_up[:, I:].
  virtual void silu_and_mul(const Tensor& gate_up, Tensor& out) = 0;
  // The MLP's gate_up linear and silu_and_mul() in one call, where this backend has a kernel for it at these
  // shapes: out [T, I] = silu(x . gate^T) * (x . up^T) for weight [2I, K] = [gate; up] (bf16, or with a non-empty
  // block_scale Qwen's FP8 codes as in linear_fp8()), equal to linear() (or linear_fp8()) into a [T, 2I] buffer
  // followed by silu_and_mul(). Returns false and does nothing where it has none: the caller runs those two.
  // input_norm: x is the half-normed output of linear_add_folded_norm (see there).
  virtual bool linear_silu_and_mul(const Tensor& x, const Tensor& weight, const Tensor& block_scale,
                                   const FoldedNormInput& input_norm, Tensor& out) {
    (void)x, (void)weight, (void)block_scale, (void)input_norm, (void)out;
    return false;
  }
  // An RMSNorm folded into the linears on either side of it, for decode batches: add_rms_norm(x . W^T, residual,
  // norm_weight) then linear(out, W2) costs two launches and a round trip more than the norm's arithmetic. The
  // linear before it (linear_add_folded_norm) adds its product to residual as add_rms_norm does and writes out =
  // residual * norm_weight and adds up the residual's sums of squares; the linear after it
  // (linear_folded_norm_input, or linear_silu_and_mul with input_norm) multiplies its products by each row's
  // 1 / rms. The same math, rounded differently (the products multiply bf16(residual * norm_weight), not
  // bf16(residual / rms * norm_weight)). Whether this backend does it for T rows of width H between linears whose
  // weights are weight_dtype (compute_dtype(), or F8_E4M3 for Qwen's block-scaled FP8), the largest of them (the
  // fused gate_up counted whole) of largest_weight_elements; the row counts it holds for are one range (from one row,
  // or from more where folding the smallest steps does not pay):
  virtual bool supports_norm_fold(int64_t tokens, int64_t hidden, DType weight_dtype,
                                  int64_t largest_weight_elements) const {
    (void)tokens, (void)hidden, (void)weight_dtype, (void)largest_weight_elements;
    return false;
  }
  // I64 words a row's sum of squares takes (the width of FoldedNormInput::sums).
  virtual int64_t folded_norm_sum_words() const { return 0; }
  // residual += x . weight^T (rounded to compute_dtype() as add_rms_norm rounds it); out = residual * norm_weight;
  // sums [T, words] += the new residual's sums of squares: the sums are accumulated, so they must be zero when the
  // call runs, and the call zeroes stale_sums (any I64 tensor, e.g. an earlier norm's sums whose readers have all
  // been enqueued before it; may be empty). weight bf16, or FP8 codes with a non-empty block_scale as in
  // linear_fp8(). Only where supports_norm_fold().
  virtual void linear_add_folded_norm(const Tensor& x, const Tensor& weight, const Tensor& block_scale,
                                      Tensor& residual, const Tensor& norm_weight, Tensor& sums, Tensor& stale_sums,
                                      Tensor& out) {
    (void)x, (void)weight, (void)block_scale, (void)residual, (void)norm_weight, (void)sums, (void)stale_sums,
        (void)out;
    throw EngineError(name() + " backend does not fold norms (linear_add_folded_norm)");
  }
  // linear() (or linear_fp8() with a non-empty block_scale) of linear_add_folded_norm's out: each product times
  // its row's 1 / rms from input_norm (those sums unchanged), then the bias. Only where supports_norm_fold().
  virtual void linear_folded_norm_input(const Tensor& x, const Tensor& weight, const Tensor& block_scale,
                                        const Tensor& bias, const FoldedNormInput& input_norm, Tensor& out) {
    (void)x, (void)weight, (void)block_scale, (void)bias, (void)input_norm, (void)out;
    throw EngineError(name() + " backend does not fold norms (linear_folded_norm_input)");
  }
  // out [R, H] = x[rows[r]].
  virtual void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) = 0;
  // Joins column chunks: parts [P, R, C] and out [R, N] with N <= P * C, both F32; out[r, p * C + j] =
  // parts[p, r, j] for every p * C + j < N (the tensor-parallel ranks' slices of the logits).
  virtual void concat_column_chunks(const Tensor& parts, Tensor& out) = 0;

  // logits[rows[i], tokens[i]] = value for every i (rows, tokens I32 [n]): bans tokens before sampling, e.g.
  // EOS while a request is still under its min_tokens.
  virtual void set_logits(Tensor& logits, const Tensor& rows, const Tensor& tokens, float value) = 0;
  // Samples one token per row of logits F32 [R, V] into token_ids I32 [R]. Order of filters: temperature,
  // min_p (always keeps the most likely token), top_k, top_p (over the probabilities renormalised across
  // the tokens still kept, keeps the smallest prefix sorted by probability whose mass reaches top_p, at least
  // one), then Gumbel-max with noise from philox_uniform(seed, step, token).
  virtual void sample(const Tensor& logits, const SamplerInputs& in, Tensor& token_ids) = 0;
  // Tensor parallelism: sample()'s pick restricted to one vocabulary shard, so that ranks exchange 8 bytes a
  // row instead of their logits. logits F32 [R, C] hold tokens vocab_start .. vocab_start + C - 1, of which
  // only the first `valid` columns are real (0 <= valid <= C; the last shard is padded and the padding,
  // whatever it holds, is ignored). Per row: best_token I32 [R] = global id of the shard's token with the
  // largest key (lowest id on ties), best_key F32 [R] = that key, where key = the raw logit for greedy rows
  // (temperature <= 0) and logit / T - log(-log(u)) with u from the GLOBAL token id otherwise: bit for bit
  // the value sample() compares, so the largest key over all shards (lowest token on equal keys) is the
  // token sample() draws from the whole row. A shard with no token of positive probability (every key -inf
  // or NaN) gives key -inf and token INT32_MAX. When every shard does, sample() takes the raw-logit argmax
  // of the row (0 when every logit is -inf or NaN): that is token 0 for greedy rows, and for sampling rows
  // too unless some logit is finite while logit / T overflows to -inf (|logit| > FLT_MAX * T), which a merge
  // needing sample()'s exact pick there gets by calling sample_shard again with temperature 0.
  // Rows must not use top_k, top_p or min_p (they need the whole row); the caller checks, and here such rows
  // are treated as plain temperature sampling.
  virtual void sample_shard(const Tensor& logits, int64_t vocab_start, int64_t valid, const SamplerInputs& in,
                            Tensor& best_key, Tensor& best_token) = 0;
  // The merge of sample_shard()'s picks over the shards, one at a time into `best` (which starts empty):
  // the largest key, the lowest token on equal keys. best stays empty when no shard had a token.
  struct ShardPick {
    static constexpr int32_t kNoToken = std::numeric_limits<int32_t>::max();  // sample_shard's "none"
    float key = -std::numeric_limits<float>::infinity();
    int32_t token = kNoToken;
    bool empty() const { return token == kNoToken; }
    // The merged row's token as sample() gives it where no token has probability and the raw argmax is no
    // help either (every logit -inf or NaN): 0.
    int32_t sampled_token() const { return empty() ? 0 : token; }
  };
  static void merge_shard_pick(ShardPick& best, float key, int32_t token) {
    if (key > best.key || (key == best.key && token < best.token)) best = {key, token};
  }
  // Log-softmax of the raw logits F32 [R, V]: target_logprob F32 [R] = logprob of targets[r] (NaN for a
  // target outside [0, V)); when k > 0,
  // top_ids I32 [R, k] and top_logprobs F32 [R, k] hold the k largest, descending (lowest id first on ties).
  virtual void logprobs(const Tensor& logits, const Tensor& targets, int k, Tensor& target_logprob, Tensor& top_ids,
                        Tensor& top_logprobs) = 0;
};

}  // namespace nanovllm
