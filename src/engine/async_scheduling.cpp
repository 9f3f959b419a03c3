// Asynchronous scheduling: ModelRunner launches a plain decode step's successor before the step's sampled ids reach
// the host, so the device does not idle while the host reads them, applies them and schedules again
// (docs/online_engine.md, "Launching the next step early"). The successor assumes the same sequences, each one
// token further, with the input ids copied on the device from the step's samples. The next run() adopts it when the
// scheduler's batch is exactly that, and drops it otherwise. Dropping is safe by queue order: the early step wrote
// only each sequence's next cache slot, in a block that is not full yet (so no prefix-cache entry holds it), and
// whatever runs later writes after it.
#include <algorithm>

#include "engine/decode_graphs.h"
#include "engine/model_runner.h"
#include "engine/token_sampler.h"

namespace nanovllm {

bool ModelRunner::is_plain_decode(const ScheduledBatch& batch) const {
  return !batch.has_prefill() && sampler_->samples_plainly(batch);
}

StepOutput ModelRunner::run_plain(const ScheduledBatch& batch) {
  PlainStep current;
  bool adopted = false;
  if (early_ && is_assumed_batch(*early_, batch)) {
    current = std::move(*early_);
    early_.reset();
    current.launched = std::chrono::steady_clock::now();  // it was handed over before this step began
    adopted = true;
  } else {
    drop_early();
    current = start_plain(batch, 0);
  }
  if (next_step_is_known(batch)) early_ = start_next_early(batch, 1 - current.slot);
  StepOutput out = finish(current);
  out.launched_early = adopted;
  return out;
}

ModelRunner::PlainStep ModelRunner::start_plain(const ScheduledBatch& batch, int slot) {
  const StepShape shape = fill_metadata(batch);
  const int bucket = graphs_ ? graphs_->bucket_for(shape.num_seqs) : 0;
  PlainStep step;
  step.num_rows = shape.num_seqs;
  step.slot = slot;
  step.launched = launch(shape, bucket);
  sampler_->enqueue_plain(step.num_rows, bucket > 0, sampled_slot(slot));
  sampled_[slot]->record();
  return step;
}

bool ModelRunner::next_step_is_known(const ScheduledBatch& batch) const {
  const int bs = config_.kvcache_block_size;
  return std::all_of(batch.items.begin(), batch.items.end(), [&](const ScheduledSequence& item) {
    const Sequence& seq = *item.seq;
    const int next = seq.size();  // the position of the token this step samples
    // After this step's token the sequence neither finishes by length (Scheduler::check_finish) nor needs a block.
    return seq.status == SequenceStatus::Running && seq.num_completion_tokens() + 1 < seq.params.max_tokens &&
           seq.size() + 1 < config_.max_model_len && next / bs < static_cast<int>(seq.block_table.size());
  });
}

ModelRunner::PlainStep ModelRunner::start_next_early(const ScheduledBatch& batch, int slot) {
  const int bs = config_.kvcache_block_size;
  const int blocks_per_seq = meta_->limits().max_blocks_per_seq;
  StepShape shape;
  shape.num_seqs = shape.num_tokens = static_cast<int>(batch.items.size());
  shape.max_seqlen_q = 1;
  shape.decode_only = true;
  PlainStep step;
  step.num_rows = shape.num_seqs;
  step.slot = slot;
  meta_->begin_fill();
  meta_->cu_seqlens_q()[0] = 0;
  for (int r = 0; r < shape.num_seqs; ++r) {  // fill_sequence's and fill_sampling_row's values one token on
    const Sequence& seq = *batch.items[r].seq;
    const int pos = seq.size();
    meta_->input_ids()[r] = 0;  // replaced on the device by this step's sample
    meta_->positions()[r] = pos;
    meta_->slot_mapping()[r] = seq.block_table[pos / bs] * bs + pos % bs;
    meta_->cu_seqlens_q()[r + 1] = r + 1;
    meta_->seq_lens_k()[r] = pos + 1;
    int32_t* table = meta_->block_tables() + static_cast<size_t>(r) * blocks_per_seq;
    const int nblocks = static_cast<int>(seq.block_table.size());
    for (int b = 0; b < blocks_per_seq; ++b) table[b] = b < nblocks ? seq.block_table[b] : -1;
    fill_sampling_row(r, r, seq.params, pos + 1);
    shape.max_seqlen_k = std::max(shape.max_seqlen_k, pos + 1);
    step.assumed.emplace_back(seq.seq_id, pos);
  }
  const int bucket = graphs_ ? graphs_->bucket_for(shape.num_seqs) : 0;
  step.launched = launch(shape, bucket, sampler_->sampled_ids());
  sampler_->enqueue_plain(step.num_rows, bucket > 0, sampled_slot(slot));
  sampled_[slot]->record();
  return step;
}

bool ModelRunner::is_assumed_batch(const PlainStep& early, const ScheduledBatch& batch) const {
  if (batch.items.size() != early.assumed.size() || batch.has_prefill()) return false;
  for (size_t r = 0; r < early.assumed.size(); ++r) {
    const ScheduledSequence& item = batch.items[r];
    if (item.seq->seq_id != early.assumed[r].first || item.seq->num_computed_tokens != early.assumed[r].second ||
        item.num_new_tokens != 1 || !item.samples)
      return false;
  }
  return true;
}

void ModelRunner::drop_early() {
  if (!early_) return;
  sampled_[early_->slot]->wait();
  early_.reset();
}

int32_t* ModelRunner::sampled_slot(int slot) const {
  return static_cast<int32_t*>(sampled_host_.data()) + static_cast<size_t>(slot) * config_.max_num_seqs;
}

StepOutput ModelRunner::finish(const PlainStep& step) {
  sampled_[step.slot]->wait();
  const int32_t* ids = sampled_slot(step.slot);
  StepOutput out;
  out.sampled.assign(ids, ids + step.num_rows);
  out.sampled_logprobs.resize(static_cast<size_t>(step.num_rows));
  out.launched = step.launched;
  return out;
}

}  // namespace nanovllm
