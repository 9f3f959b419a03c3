#pragma once
// The Qwen3 (and Qwen2) decoder, written once over the Backend op set. It owns the weights (fused QKV and
// gate/up, uploaded in the backend's compute dtype) and the activation buffers of the largest step.
// Under tensor parallelism it holds one rank's shard (see ShardLayout) and adds the layout's collectives: an
// all-reduce after the vocabulary-parallel embedding, after o_proj and after down_proj (row-parallel), and
// the lm_head's vocabulary chunks gathered to rank 0. The two per layer are fused with the residual add and
// RMSNorm that follow them where the communicator can (reduce_add_norm).
// With an FP8 quantization_config the decoder layers' linears hold F8_E4M3 weights and their 128 x 128 block
// scales (Backend::linear_fp8); their fused parts and tensor-parallel cuts must fall on multiples of 128.
#include <vector>

#include "backend/backend.h"
#include "model/hf_config.h"
#include "model/shard_layout.h"
#include "model/weight_source.h"
#include "parallel/communicator.h"

namespace nanovllm {

// Device views of one step's flat metadata (see ModelRunner for how they are filled).
struct StepTensors {
  int num_tokens = 0;
  Tensor input_ids;     // I32 [T]
  Tensor positions;     // I32 [T]
  Tensor slot_mapping;  // I32 [T]
  AttentionBatch attention;
};

class Qwen3Model {
 public:
  // max_num_tokens / max_logits_rows bound every step; rope positions go up to max_model_len. `comm` is
  // null for one rank; otherwise shard.rank / shard.size match it.
  Qwen3Model(const ModelConfig& config, const ShardLayout& shard, Communicator* comm, Backend& backend,
             WeightSource& weights, int max_num_tokens, int max_logits_rows, int max_model_len);

  // Runs the decoder over the step's tokens: K/V are written to `cache` first, then attended through it.
  // The final hidden states stay inside the model for logits().
  void forward(const StepTensors& step, std::vector<KvCacheLayer>& cache);
  // F32 logits [R, V] of the token rows `rows` (I32 [R]) of the last forward(); only these reach the lm_head.
  // Every rank calls it; only rank 0 receives `out` (other ranks may pass an empty tensor).
  void logits(const Tensor& rows, Tensor& out);
  // Tensor parallelism, logits() in two halves: this rank's vocabulary chunk of the rows' logits, F32 [R,
  // vocab_chunk] (columns past the shard's vocab_rows are padding), then that chunk gathered to rank 0 into
  // `out` (every rank calls it). Between the two a caller may sample on the chunks instead
  // (Backend::sample_shard, on last_shard_logits()).
  void shard_logits(const Tensor& rows);
  void gather_logits(int64_t n, Tensor& out);
  // The chunk the last shard_logits() computed (e.g. inside a replayed CUDA graph), first n rows.
  Tensor last_shard_logits(int64_t n) const { return local_logits_.rows(0, n); }

  const ModelConfig& config() const { return config_; }
  size_t weight_bytes() const { return weight_bytes_; }  // of this rank

 private:
  // A linear's weight [N, K]: in compute_dtype(), or (config.json's quantization_config) F8_E4M3 with its
  // block scales F32 [ceil(N / 128), ceil(K / 128)] for Backend::linear_fp8.
  struct LinearWeight {
    Tensor weight;
    Tensor block_scale;  // empty unless FP8
  };
  struct Layer {
    Tensor input_norm, post_attention_norm;
    LinearWeight qkv;  // [(nh + 2 nkv) d, H], rows q | k | v
    Tensor qkv_bias, q_norm, k_norm;
    LinearWeight o_proj;
    LinearWeight gate_up;  // [2 I, H], rows gate | up
    LinearWeight down_proj;
  };

  // A block of one checkpoint tensor: its full shape and the rows × columns this rank holds.
  struct Part {
    std::string name;
    std::vector<int64_t> shape;
    IndexRange rows, cols;
  };
  static Part whole(std::string name, std::vector<int64_t> shape);
  static Part row_block(std::string name, std::vector<int64_t> shape, int64_t begin, int64_t count);
  static Part column_block(std::string name, std::vector<int64_t> shape, int64_t begin, int64_t count);

  Tensor allocate(DType dtype, std::initializer_list<int64_t> shape);
  // Uploads the parts one after another into a fresh tensor of `shape` (fusion by concatenating rows). The
  // parts must fill it, except with kZeroRows, where the rows they leave over are zeroed (the padding of the
  // last vocabulary chunk).
  enum class Padding { kNone, kZeroRows };
  Tensor load(WeightSource& weights, const std::vector<Part>& parts, std::initializer_list<int64_t> shape,
              Padding padding = Padding::kNone);
  // A linear's weight from the parts' ".weight" tensors: FP8 when the quantization covers their modules, each
  // part with its block scales (the scales' rows concatenate like the weights'), else as load() does.
  LinearWeight load_linear(WeightSource& weights, const std::vector<Part>& parts, int64_t rows, int64_t cols);
  LinearWeight load_fp8_linear(WeightSource& weights, const std::vector<Part>& parts, int64_t rows, int64_t cols);
  // The one-line refusal of an F8_E4M3 tensor where the model wants it in compute_dtype().
  std::string fp8_refusal(const std::string& name) const;
  // input_norm: x is the output of a linear that folded the norm in (Backend::linear_add_folded_norm).
  void linear(const Tensor& x, const LinearWeight& w, const Tensor& bias, Tensor& out,
              const FoldedNormInput& input_norm = {});
  void build_rope_table(int max_model_len);
  // The last forward's final hidden states of `rows`, in last_hidden_.
  Tensor last_hidden_rows(const Tensor& rows);
  // residual += x summed over the ranks; out = rms_norm(residual) * weight.
  void reduce_add_norm(Tensor& x, Tensor& residual, const Tensor& weight, Tensor& out);

  ModelConfig config_;
  ShardLayout shard_;
  Communicator* comm_;
  Backend& backend_;
  std::vector<Buffer> storage_;
  size_t weight_bytes_ = 0;

  Tensor embed_tokens_, final_norm_, lm_head_, rope_;
  std::vector<Layer> layers_;

  // Activations of the largest step.
  Tensor residual_, hidden_, qkv_out_, q_, attn_out_, delta_, gate_up_out_, act_, last_hidden_;
  // Decode steps of folded_norm_min_rows_ to folded_norm_rows_ rows fold the norms (Backend::supports_norm_fold; 0:
  // none do). Their sums of squares: folded_norm_rows_ rows a folded norm of the step (I64 [norms x rows, sum
  // words]), kept zero between the norm's linears by the forward step.
  int64_t folded_norm_min_rows_ = 0;
  int64_t folded_norm_rows_ = 0;
  Tensor norm_sums_;
  // Tensor parallelism: this rank's logits chunk [R, vocab_chunk], and on rank 0 all of them [size, R, chunk].
  Tensor local_logits_, gathered_logits_;
};

}  // namespace nanovllm
