#pragma once
// Runs one scheduled step on one backend: fills the step's flat metadata, runs the model, samples the next
// token of every sequence that finished its prompt chunk, and computes the logprobs requests asked for.
// Under tensor parallelism there is one runner per rank, all running the same steps at once; each computes
// its shard, and only rank 0's (the driver's) logits, samples and logprobs exist.
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "engine/scheduler.h"
#include "engine/step_metadata.h"
#include "model/qwen3.h"
#include "nanovllm/config.h"
#include "nanovllm/llm.h"

namespace nanovllm {

class DecodeGraphs;

struct StepOutput {
  // One per scheduled item with samples == true, in item order.
  std::vector<int32_t> sampled;
  std::vector<PositionLogprobs> sampled_logprobs;  // empty entries where the request asked none
  // Logprobs of prompt tokens: `position` is the index of the scored prompt token (>= 1).
  struct PromptEntry {
    int item = 0;
    int position = 0;
    PositionLogprobs entry;
  };
  std::vector<PromptEntry> prompt_logprobs;
  // When the model's work was handed to the device (the bench's split of a step into host and device time).
  std::chrono::steady_clock::time_point launched;
  // Tensor parallelism: the rows were sampled on the vocabulary shards (only picks reached rank 0).
  bool sampled_on_shards = false;
};

class ModelRunner {
 public:
  // comm: null for a single rank.
  ModelRunner(const EngineConfig& config, const ModelConfig& model_config, std::unique_ptr<Backend> backend,
              WeightSource& weights, Communicator* comm = nullptr);
  ~ModelRunner();

  // On ranks other than 0 the tokens and logprobs are empty (only launched and sampled_on_shards are set).
  StepOutput run(const ScheduledBatch& batch);

  int num_kvcache_blocks() const { return num_kvcache_blocks_; }
  size_t kv_cache_bytes() const { return kv_cache_bytes_; }
  const Qwen3Model& model() const { return *model_; }
  Backend& backend() { return *backend_; }

 private:
  void allocate_kv_cache();
  void warmup();
  void capture_graphs();
  // Fills rows [from, to) of the step metadata as inert decode sequences (no cache write, one key).
  void pad_decode_rows(int from, int to);
  // The lm_head over the step's first n sampling rows: the whole logits into logits_buf_ on one rank; under
  // tensor parallelism this rank's vocabulary chunk, gathered or sampled where it is afterwards.
  void sampling_logits(int n);
  // Device views of the step metadata for a step of this shape.
  StepTensors step_tensors(int num_tokens, int num_seqs, int max_seqlen_q, int max_seqlen_k, bool decode_only) const;
  size_t kv_block_bytes() const;
  // logits_buf_ viewed as [n, V] on the driver; empty on the other ranks (they only send their chunk).
  Tensor logits_view(int n) const;
  // Token rows' logits in chunks of max_logits_rows, then their logprobs against `targets`.
  void score_rows(const std::vector<int32_t>& rows, const std::vector<int32_t>& targets, int k,
                  std::vector<PositionLogprobs>& out);
  // Logprobs of logits F32 [n, V] (at most max_logits_rows rows) against targets[0..n): the target and top k.
  void logprobs_of(const Tensor& logits, const int32_t* targets, int k, PositionLogprobs* out);

  EngineConfig config_;
  ModelConfig model_config_;
  ShardLayout shard_;
  Communicator* comm_;
  bool driver_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Qwen3Model> model_;
  std::unique_ptr<StepMetadata> meta_;
  std::vector<Buffer> kv_storage_;
  std::vector<KvCacheLayer> kv_cache_;
  int num_kvcache_blocks_ = 0;
  size_t kv_cache_bytes_ = 0;
  int max_logits_rows_ = 0;

  // Scratch in backend memory: logits [R, V], sampled ids, logprob outputs, score rows/targets (rows_buf_ on
  // every rank, which all make the lm_head calls; the rest on the driver only).
  Buffer logits_buf_, sampled_buf_, rows_buf_, targets_buf_, target_lp_buf_, top_ids_buf_, top_lp_buf_;
  Buffer ban_rows_buf_, ban_tokens_buf_;  // (row, token) pairs masked before sampling
  // Tensor parallelism: this rank's picks [4, R] (sampled key, token, greedy key, token), everyone's on the
  // driver [ranks, 4, R] (and their pinned host copy), and temperature 0 for every row (the greedy picks).
  Buffer picks_buf_, gathered_picks_buf_, gathered_picks_host_, zero_temperature_buf_;
  static constexpr int kBansPerRow = 8;

  // (row, token) pairs: EOS and stop tokens of rows whose request has not reached min_tokens (vLLM's
  // semantics: they cannot be sampled yet). The same on every rank.
  struct Bans {
    std::vector<int32_t> rows, tokens;
  };
  Bans early_stop_bans(const ScheduledBatch& batch) const;
  // Sets the banned logits to -inf (driver only).
  void apply_bans(const Bans& bans, Tensor& logits);
  // The logits of the n sampling rows as a whole (one rank: in place already; tensor parallelism: gathered
  // to the driver), bans applied, then sample() and the logprobs asked for.
  void sample_whole_rows(const ScheduledBatch& batch, const Bans& bans, int n, bool want_logprobs, int want_k,
                         StepOutput& out);
  // Tensor parallelism: every rank samples its vocabulary chunk of the last shard_logits() (n rows), and
  // only (key, token) pairs reach rank 0, which keeps each row's best. Returns the tokens on the driver.
  // sample() takes the raw-logit argmax of a row where no token has probability. Only with 0 < T < 1 can
  // that differ from the merge's own fallback (token 0, for a row of -inf / NaN logits): a finite logit whose
  // logit / T overflows. Then (raw_argmax_fallback, decided from the batch, so alike on every rank) a second
  // pass at temperature 0 sends each shard's raw argmax too.
  std::vector<int32_t> sample_on_shards(int n, bool raw_argmax_fallback);
  void keep_requested_logprobs(const ScheduledBatch& batch, std::vector<PositionLogprobs>& sampled) const;
  std::unique_ptr<DecodeGraphs> graphs_;
};

}  // namespace nanovllm
