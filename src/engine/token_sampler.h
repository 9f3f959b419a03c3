#pragma once
// A step's second half, after the forward: the lm_head over the rows that sample, the EOS / stop-token bans of
// requests under their min_tokens, the pick of each next token, and the logprobs requests asked for (of
// sampled and of prompt tokens). Owns the scratch buffers for all of it, allocated once.
// Under tensor parallelism there is one per rank, all making the same lm_head calls and collectives (every
// choice below is a function of the batch alone). Rows are sampled whole on rank 0 (the driver) from the
// gathered logits, or, where no filter needs the whole row, on each rank's vocabulary shard with only the
// picks merged on the driver. Only the driver's tokens and logprobs exist.
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "engine/scheduler.h"
#include "engine/step_metadata.h"
#include "engine/step_output.h"
#include "model/qwen3.h"
#include "parallel/communicator.h"

namespace nanovllm {

class TokenSampler {
 public:
  // comm: null for a single rank. meta: the step metadata whose logits rows and sampling controls the
  // runner fills.
  TokenSampler(Backend& backend, Qwen3Model& model, StepMetadata& meta, const ModelConfig& model_config,
               const ShardLayout& shard, Communicator* comm, int max_logits_rows);

  // The lm_head over the step's first n sampling rows: the whole logits on one rank; under tensor
  // parallelism this rank's vocabulary chunk, gathered or sampled where it is afterwards. A decode graph
  // records it after the forward.
  void compute_logits(int n);
  // After the forward of `batch`, whose logits rows and sampling controls are in the metadata: fills out's
  // tokens and logprobs (on the driver; the other ranks only take part). logits_ready: compute_logits() ran
  // already (in a replayed decode graph).
  void run(const ScheduledBatch& batch, bool logits_ready, StepOutput& out);

  // Whether every item of `batch` samples with nothing but its token to report: one rank, no logprobs, no bans,
  // no prompt logprobs. Such a step can be sampled by enqueue_plain.
  bool samples_plainly(const ScheduledBatch& batch) const;
  // run()'s work for such a step of n sampling rows, enqueued: the ids land in host_ids (allocate_host memory,
  // n entries) once the device has run what is queued now; nothing waits.
  void enqueue_plain(int n, bool logits_ready, int32_t* host_ids);
  // The device buffer the last sample wrote its n ids to (I32, row order), for a step that takes them as input.
  const int32_t* sampled_ids() const { return static_cast<const int32_t*>(sampled_buf_.data()); }

 private:
  // (row, token) pairs: EOS and stop tokens of rows whose request has not reached min_tokens (vLLM's
  // semantics: they cannot be sampled yet).
  struct Bans {
    std::vector<int32_t> rows, tokens;
  };
  // What a batch asks of the sampler.
  struct Plan {
    int num_samples = 0;
    int want_k = 0;  // top logprobs to compute: the most any request asked for
    bool want_sample_logprobs = false;
    bool needs_whole_rows = false;     // a sampling filter that looks at the whole vocabulary (top_k, top_p, min_p)
    bool raw_argmax_fallback = false;  // a row whose logit / T may overflow (see sample_on_shards)
    Bans bans;
    std::vector<int32_t> prompt_rows, prompt_targets;  // token rows whose logits score the next prompt token
    std::vector<std::pair<int, int>> prompt_where;     // (item, scored position) of each
  };
  Plan plan(const ScheduledBatch& batch) const;
  void add_bans(int row, const Sequence& seq, Bans& bans) const;
  // logits_buf_ viewed as [n, V] on the driver; empty on the other ranks (they only send their chunk).
  Tensor logits_view(int n) const;
  // Sets the banned logits to -inf (driver only).
  void apply_bans(const Bans& bans, Tensor& logits);
  // The logits of the n sampling rows as a whole (one rank: in place already; tensor parallelism: gathered
  // to the driver), bans applied, then Backend::sample and the logprobs asked for.
  void sample_whole_rows(const ScheduledBatch& batch, const Plan& plan, StepOutput& out);
  // Tensor parallelism: every rank samples its vocabulary chunk of the last shard_logits() (n rows), and
  // only (key, token) pairs reach rank 0, which keeps each row's best. Returns the tokens on the driver.
  // sample() takes the raw-logit argmax of a row where no token has probability. Only with 0 < T < 1 can
  // that differ from the merge's own fallback (token 0, for a row of -inf / NaN logits): a finite logit whose
  // logit / T overflows. Then (raw_argmax_fallback, decided from the batch, so alike on every rank) a second
  // pass at temperature 0 sends each shard's raw argmax too.
  std::vector<int32_t> sample_on_shards(int n, bool raw_argmax_fallback);
  // Each sampled row computed want_k alternatives; a request gets only the `logprobs` it asked for (or none).
  void keep_requested_logprobs(const ScheduledBatch& batch, std::vector<PositionLogprobs>& sampled) const;
  // The prompt tokens' logprobs the batch asked for, into out.prompt_logprobs.
  void score_prompts(const ScheduledBatch& batch, const Plan& plan, StepOutput& out);
  // Token rows' logits in chunks of max_logits_rows, then their logprobs against `targets`.
  void score_rows(const std::vector<int32_t>& rows, const std::vector<int32_t>& targets, int k,
                  std::vector<PositionLogprobs>& out);
  // Logprobs of logits F32 [n, V] (at most max_logits_rows rows) against targets[0..n): the target and top k.
  void logprobs_of(const Tensor& logits, const int32_t* targets, int k, PositionLogprobs* out);

  static constexpr int kBansPerRow = 8;

  Backend& backend_;
  Qwen3Model& model_;
  StepMetadata& meta_;
  Communicator* comm_;
  bool driver_;
  int vocab_size_;
  std::vector<int32_t> eos_token_ids_;
  int64_t vocab_start_, vocab_rows_;  // this rank's vocabulary shard
  int max_logits_rows_;

  // Scratch in backend memory: logits [R, V], sampled ids, logprob outputs, score rows/targets (rows_buf_ on
  // every rank, which all make the lm_head calls; the rest on the driver only).
  Buffer logits_buf_, sampled_buf_, rows_buf_, targets_buf_, target_lp_buf_, top_ids_buf_, top_lp_buf_;
  Buffer ban_rows_buf_, ban_tokens_buf_;  // (row, token) pairs masked before sampling
  // Tensor parallelism: this rank's picks [4, R] (sampled key, token, greedy key, token), everyone's on the
  // driver [ranks, 4, R] (and their pinned host copy), and temperature 0 for every row (the greedy picks).
  Buffer picks_buf_, gathered_picks_buf_, gathered_picks_host_, zero_temperature_buf_;
};

}  // namespace nanovllm
