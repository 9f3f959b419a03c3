#pragma once
// Decides each step's batch and applies its results. One token budget per step (max_num_batched_tokens),
// shared as config.step_policy says:
//   DecodeFirst (vLLM V1): one decode token for every running sequence, oldest first, then chunks of the
//     partly prefilled prompt and of waiting prompts in the rest of the budget. Prefill and decode rows share
//     a step, so running streams keep getting a token every step while a long prompt is prefilled.
//   PrefillFirst (nano-vLLM plus chunked prefill): a step prefills while a prompt is partly prefilled or a
//     waiting one fits, and decodes only otherwise.
//
// Queues: `waiting` (FIFO; preempted sequences go back to the front), at most one `prefilling` sequence whose
// prefill was cut by the token budget (it continues before any other prompt is admitted), and `running`
// (prefilled, decoding, oldest first). A sequence that needs a KV block when none is free preempts the newest:
// the prefilling one first, then the newest running one.
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"
#include "nanovllm/config.h"

namespace nanovllm {

// Compute tokens [seq->num_computed_tokens, seq->num_computed_tokens + num_new_tokens) of seq.
struct ScheduledSequence {
  Sequence* seq;
  int num_new_tokens;
  bool samples;  // the chunk ends at the sequence's end: the runner samples its next token
};

// Decode rows (one token of a running sequence) come first, then prompt chunks (prefill rows, recomputation
// of preempted sequences included).
struct ScheduledBatch {
  std::vector<ScheduledSequence> items;
  int num_decode_rows = 0;  // items [0, num_decode_rows) are decode rows
  int num_tokens = 0;       // sum of num_new_tokens
  bool empty() const { return items.empty(); }
  // Some row computes prompt tokens (a prefill or a mixed step); false: every row decodes one token.
  bool has_prefill() const { return static_cast<int>(items.size()) > num_decode_rows; }
  int num_samples() const;  // items with samples == true
};

class Scheduler {
 public:
  // Uses max_num_batched_tokens, max_num_seqs, max_model_len, kvcache_block_size, enable_prefix_caching and
  // step_policy.
  Scheduler(const EngineConfig& config, int num_kvcache_blocks, std::vector<int32_t> eos_token_ids);

  // Takes ownership. Throws InvalidInput for an empty prompt, a prompt longer than max_model_len, bad sampling
  // params, or a sequence that could never fit in the KV cache, even alone (see scheduler.cpp).
  void add(std::unique_ptr<Sequence> seq);
  // No sequence waiting, prefilling or running (finished ones not yet taken do not count).
  bool is_finished() const;

  // Empty only when is_finished(); throws EngineError if work is pending but nothing can run (a broken
  // invariant: add() admits only sequences that fit the cache alone).
  ScheduledBatch schedule();
  // sampled_token_ids: one per item with samples == true, in item order. Do not release() a scheduled
  // sequence before its batch was postprocessed.
  void postprocess(const ScheduledBatch& batch, std::span<const int32_t> sampled_token_ids);

  // Sequences finished (or aborted) since the last call; their blocks are already free. They stay owned here
  // until release(seq_id).
  std::vector<Sequence*> take_finished();
  // Sequences finished (e.g. aborted) but not yet taken: their outputs are still owed to the caller.
  bool has_untaken_finished() const { return !finished_.empty(); }
  void release(int64_t seq_id);
  // Finishes with Abort and frees the blocks, wherever the sequence is; no-op for a finished or unknown id.
  void abort(int64_t seq_id);
  // Finishes an unfinished sequence with `reason` (the engine's stop strings). On a sequence that already
  // finished (not yet released, not aborted) it only replaces the reason, e.g. Length -> Stop when the last token also
  // completed a stop string.
  void finish(int64_t seq_id, FinishReason reason);

  Sequence* find(int64_t seq_id);
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()) + (prefilling_ ? 1 : 0); }
  const BlockManager& block_manager() const { return block_manager_; }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  ScheduledBatch schedule_decode_first();
  ScheduledBatch schedule_prefill_first();
  // Each appends to `batch` and spends `budget`.
  void schedule_decodes(ScheduledBatch& batch, int& budget);
  void schedule_prompts(ScheduledBatch& batch, int& budget);
  void schedule_chunk(ScheduledBatch& batch, Sequence& seq, int& budget);
  // Preempts the newest sequence that holds blocks, besides the one being decoded (out of running_ by then);
  // false when there is none.
  bool preempt_newest();
  void preempt(Sequence& seq);
  FinishReason check_finish(const Sequence& seq) const;
  void finish_sequence(Sequence& seq, FinishReason reason);  // removes it from wherever it is
  bool is_eos(int32_t token_id) const;

  int max_num_batched_tokens_;
  int max_num_seqs_;
  int max_model_len_;
  StepPolicy step_policy_;
  std::vector<int32_t> eos_token_ids_;
  BlockManager block_manager_;
  std::unordered_map<int64_t, std::unique_ptr<Sequence>> sequences_;
  std::deque<Sequence*> waiting_;
  Sequence* prefilling_ = nullptr;
  std::deque<Sequence*> running_;
  std::vector<Sequence*> finished_;
  int64_t num_preemptions_ = 0;
};

}  // namespace nanovllm
