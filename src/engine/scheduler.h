#pragma once
// Decides each step's batch (nano-vLLM's policy plus chunked prefill) and applies its results.
//
// Queues: `waiting` (FIFO; preempted sequences go back to the front), at most one `prefilling` sequence whose
// prefill was cut by the token budget, and `running` (admitted, oldest first). While a sequence is prefilling
// it continues first in every step and nothing is decoded (prefill has priority, as in nano-vLLM).
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

struct ScheduledBatch {
  std::vector<ScheduledSequence> items;
  bool is_prefill = false;
  int num_tokens = 0;  // sum of num_new_tokens
  bool empty() const { return items.empty(); }
  int num_samples() const;  // items with samples == true
};

class Scheduler {
 public:
  // Uses max_num_batched_tokens, max_num_seqs, max_model_len, kvcache_block_size and enable_prefix_caching.
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
  ScheduledBatch schedule_prefill();
  ScheduledBatch schedule_decode();
  void preempt(Sequence& seq);
  FinishReason check_finish(const Sequence& seq) const;
  void finish_sequence(Sequence& seq, FinishReason reason);  // removes it from wherever it is
  bool is_eos(int32_t token_id) const;

  int max_num_batched_tokens_;
  int max_num_seqs_;
  int max_model_len_;
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
