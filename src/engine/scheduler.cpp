#include "engine/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"

namespace nanovllm {

namespace {

void require_positive(const char* name, int value) {
  if (value < 1) throw InvalidInput(std::string(name) + " must be >= 1, got " + std::to_string(value));
}

void erase_pointer(std::deque<Sequence*>& queue, const Sequence* seq) {
  queue.erase(std::remove(queue.begin(), queue.end(), seq), queue.end());
}

}  // namespace

int ScheduledBatch::num_samples() const {
  return static_cast<int>(std::count_if(items.begin(), items.end(), [](const auto& item) { return item.samples; }));
}

Scheduler::Scheduler(const EngineConfig& config, int num_kvcache_blocks, std::vector<int32_t> eos_token_ids)
    : max_num_batched_tokens_(config.max_num_batched_tokens),
      max_num_seqs_(config.max_num_seqs),
      max_model_len_(config.max_model_len),
      step_policy_(config.step_policy),
      eos_token_ids_(std::move(eos_token_ids)),
      block_manager_(num_kvcache_blocks, config.kvcache_block_size, config.enable_prefix_caching) {
  require_positive("max_num_batched_tokens", max_num_batched_tokens_);
  require_positive("max_num_seqs", max_num_seqs_);
  require_positive("max_model_len", max_model_len_);
}

// Admission rule (so that nothing ever waits forever): the prompt has 1..max_model_len tokens, and the
// sequence at its longest must fit in the whole KV cache on its own. At its longest a sequence has
// final = min(prompt + max_tokens, max(max_model_len, prompt + 1)) tokens (a prompt of exactly max_model_len
// tokens still gets one token, as in vLLM); the last token is never computed, so it needs KV blocks for
// final - 1 tokens. Anything that passes can always be (re)admitted once the other sequences are gone.
void Scheduler::add(std::unique_ptr<Sequence> seq) {
  if (!seq) throw EngineError("Scheduler::add: null sequence");
  if (seq->size() < 1) throw InvalidInput("prompt is empty");
  if (seq->size() > max_model_len_) {
    throw InvalidInput("prompt has " + std::to_string(seq->size()) + " tokens, more than max_model_len " +
                       std::to_string(max_model_len_));
  }
  seq->params.validate();
  const int64_t prompt_len = seq->size();
  const int64_t final_len =
      std::min<int64_t>(prompt_len + seq->params.max_tokens, std::max<int64_t>(max_model_len_, prompt_len + 1));
  const int64_t block_size = block_manager_.block_size();
  const int64_t blocks_needed = (final_len - 1 + block_size - 1) / block_size;
  if (blocks_needed > block_manager_.num_blocks()) {
    throw InvalidInput("request needs up to " + std::to_string(blocks_needed) + " KV cache blocks (" +
                       std::to_string(final_len - 1) + " tokens of " + std::to_string(block_size) +
                       " per block) but the cache has only " + std::to_string(block_manager_.num_blocks()) +
                       " blocks; lower max_tokens or max_model_len");
  }
  if (sequences_.contains(seq->seq_id)) {
    throw EngineError("Scheduler::add: sequence id " + std::to_string(seq->seq_id) + " is already in use");
  }
  seq->status = SequenceStatus::Waiting;
  seq->finish_reason = FinishReason::None;
  Sequence* raw = seq.get();
  sequences_.emplace(raw->seq_id, std::move(seq));
  waiting_.push_back(raw);
}

bool Scheduler::is_finished() const { return waiting_.empty() && running_.empty() && prefilling_ == nullptr; }

ScheduledBatch Scheduler::schedule() {
  ScheduledBatch batch = step_policy_ == StepPolicy::DecodeFirst ? schedule_decode_first() : schedule_prefill_first();
  // add()'s admission rule makes this unreachable; fail loudly rather than let the engine spin.
  if (batch.empty() && !is_finished()) {
    throw EngineError("Scheduler stalled: " + std::to_string(waiting_.size()) + " waiting, " +
                      std::to_string(num_running()) + " running, " + std::to_string(block_manager_.num_free_blocks()) +
                      " free blocks, nothing schedulable");
  }
  return batch;
}

ScheduledBatch Scheduler::schedule_decode_first() {
  ScheduledBatch batch;
  int budget = max_num_batched_tokens_;
  schedule_decodes(batch, budget);
  schedule_prompts(batch, budget);
  return batch;
}

ScheduledBatch Scheduler::schedule_prefill_first() {
  ScheduledBatch batch;
  int budget = max_num_batched_tokens_;
  schedule_prompts(batch, budget);
  if (!batch.empty()) return batch;
  schedule_decodes(batch, budget);
  // Decode can preempt every running sequence (only when one alone outgrows what is free); admit again.
  if (batch.empty()) schedule_prompts(batch, budget);
  return batch;
}

void Scheduler::schedule_decodes(ScheduledBatch& batch, int& budget) {
  std::vector<Sequence*> scheduled;
  while (!running_.empty() && budget > 0 && static_cast<int>(scheduled.size()) < max_num_seqs_) {
    Sequence* seq = running_.front();
    running_.pop_front();
    bool fits = true;
    while (!block_manager_.can_append(*seq)) {
      if (!preempt_newest()) {
        preempt(*seq);
        fits = false;
        break;
      }
    }
    if (!fits) break;
    if (seq->num_computed_tokens != seq->size() - 1) {
      throw EngineError("Scheduler: sequence " + std::to_string(seq->seq_id) + " is decoding with " +
                        std::to_string(seq->num_computed_tokens) + " of " + std::to_string(seq->size()) +
                        " tokens computed");
    }
    block_manager_.may_append(*seq);
    scheduled.push_back(seq);
    --budget;
  }
  // Scheduled sequences go back to the front in order (the oldest stay oldest).
  running_.insert(running_.begin(), scheduled.begin(), scheduled.end());
  for (Sequence* seq : scheduled) batch.items.push_back({seq, 1, true});
  batch.num_decode_rows += static_cast<int>(scheduled.size());
  batch.num_tokens += static_cast<int>(scheduled.size());
}

// The prefilling sequence was admitted last; then the back of running_ is the newest.
bool Scheduler::preempt_newest() {
  if (prefilling_ != nullptr) {
    preempt(*std::exchange(prefilling_, nullptr));
    return true;
  }
  if (running_.empty()) return false;
  Sequence* newest = running_.back();
  running_.pop_back();
  preempt(*newest);
  return true;
}

void Scheduler::schedule_prompts(ScheduledBatch& batch, int& budget) {
  // A prefill cut by the budget continues before anything else is admitted.
  if (prefilling_ != nullptr && budget > 0) schedule_chunk(batch, *std::exchange(prefilling_, nullptr), budget);
  while (prefilling_ == nullptr && !waiting_.empty() && budget > 0 && num_running() < max_num_seqs_) {
    Sequence& seq = *waiting_.front();
    if (!block_manager_.can_allocate(seq)) break;
    waiting_.pop_front();
    block_manager_.allocate(seq);
    seq.status = SequenceStatus::Running;
    schedule_chunk(batch, seq, budget);
  }
}

// As much of the rest of seq's prompt as the budget allows (a prefix-cache hit is computed already); a
// prompt cut short stays the prefilling one.
void Scheduler::schedule_chunk(ScheduledBatch& batch, Sequence& seq, int& budget) {
  const int remaining = seq.size() - seq.num_computed_tokens;  // >= 1: the last block is never a hit
  const int num_new = std::min(remaining, budget);
  const bool completes = num_new == remaining;
  batch.items.push_back({&seq, num_new, completes});
  batch.num_tokens += num_new;
  budget -= num_new;
  if (completes) running_.push_back(&seq);
  else prefilling_ = &seq;
}

// Preemption by recompute: the blocks are freed (they stay in the prefix cache until reused) and the whole
// token list is prefilled again on re-admission.
void Scheduler::preempt(Sequence& seq) {
  seq.status = SequenceStatus::Waiting;
  block_manager_.deallocate(seq);
  waiting_.push_front(&seq);
  ++num_preemptions_;
}

void Scheduler::postprocess(const ScheduledBatch& batch, std::span<const int32_t> sampled_token_ids) {
  const int num_samples = batch.num_samples();
  if (static_cast<size_t>(num_samples) != sampled_token_ids.size()) {
    throw EngineError("Scheduler::postprocess: " + std::to_string(sampled_token_ids.size()) + " sampled tokens for " +
                      std::to_string(num_samples) + " sampling sequences");
  }
  size_t next_sample = 0;
  for (const ScheduledSequence& item : batch.items) {
    Sequence& seq = *item.seq;
    const int32_t token_id = item.samples ? sampled_token_ids[next_sample++] : -1;
    if (seq.status != SequenceStatus::Running) continue;  // aborted since schedule()
    seq.num_computed_tokens += item.num_new_tokens;
    if (seq.num_computed_tokens > seq.size()) {
      throw EngineError("Scheduler::postprocess: sequence " + std::to_string(seq.seq_id) + " computed past its end");
    }
    block_manager_.commit_computed_blocks(seq);
    if (!item.samples) continue;
    seq.append_token(token_id);
    if (const FinishReason reason = check_finish(seq); reason != FinishReason::None) finish_sequence(seq, reason);
  }
}

bool Scheduler::is_eos(int32_t token_id) const {
  return std::find(eos_token_ids_.begin(), eos_token_ids_.end(), token_id) != eos_token_ids_.end();
}

FinishReason Scheduler::check_finish(const Sequence& seq) const {
  const SamplingParams& params = seq.params;
  const int32_t token_id = seq.last_token();
  if (seq.num_completion_tokens() >= params.min_tokens) {
    const bool stops =
        (!params.ignore_eos && is_eos(token_id)) ||
        std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token_id) != params.stop_token_ids.end();
    if (stops) return FinishReason::Stop;
  }
  if (seq.num_completion_tokens() >= params.max_tokens) return FinishReason::Length;
  if (seq.size() >= max_model_len_) return FinishReason::Length;
  return FinishReason::None;
}

void Scheduler::finish_sequence(Sequence& seq, FinishReason reason) {
  if (prefilling_ == &seq) prefilling_ = nullptr;
  erase_pointer(running_, &seq);
  erase_pointer(waiting_, &seq);
  block_manager_.deallocate(seq);
  seq.status = SequenceStatus::Finished;
  seq.finish_reason = reason;
  finished_.push_back(&seq);
}

std::vector<Sequence*> Scheduler::take_finished() { return std::exchange(finished_, {}); }

void Scheduler::release(int64_t seq_id) {
  const auto found = sequences_.find(seq_id);
  if (found == sequences_.end()) return;
  Sequence* seq = found->second.get();
  if (!seq->is_finished()) {
    throw EngineError("Scheduler::release: sequence " + std::to_string(seq_id) + " has not finished");
  }
  finished_.erase(std::remove(finished_.begin(), finished_.end(), seq), finished_.end());
  sequences_.erase(found);
}

void Scheduler::abort(int64_t seq_id) {
  Sequence* seq = find(seq_id);
  if (seq == nullptr || seq->is_finished()) return;
  finish_sequence(*seq, FinishReason::Abort);
}

void Scheduler::finish(int64_t seq_id, FinishReason reason) {
  if (reason == FinishReason::None) throw EngineError("Scheduler::finish: reason None");
  Sequence* seq = find(seq_id);
  if (seq == nullptr) return;
  if (seq->is_finished()) {
    if (seq->finish_reason != FinishReason::Abort) seq->finish_reason = reason;
    return;
  }
  finish_sequence(*seq, reason);
}

Sequence* Scheduler::find(int64_t seq_id) {
  const auto found = sequences_.find(seq_id);
  return found == sequences_.end() ? nullptr : found->second.get();
}

}  // namespace nanovllm
