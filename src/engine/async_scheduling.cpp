// Asynchronous scheduling: ModelRunner launches a plain decode step's successor before the step's sampled ids reach
// the host, so the device does not idle while the host reads them, applies them and schedules again
// (docs/online_engine.md, "Asynchronous scheduling"). The successor assumes the same sequences, each one
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
    drop_early();  // both slots are free now
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
    return seq.num_completion_tokens() + 1 < seq.params.max_tokens && next + 1 < config_.max_model_len &&
           next / bs < static_cast<int>(seq.block_table.size());
  });
}

ModelRunner::PlainStep ModelRunner::start_next_early(const ScheduledBatch& batch, int slot) {
  StepShape shape;
  shape.num_seqs = shape.num_tokens = static_cast<int>(batch.items.size());
  shape.max_seqlen_q = 1;
  shape.decode_only = true;
  PlainStep step;
  step.num_rows = shape.num_seqs;
  step.slot = slot;
  meta_->begin_fill();
  meta_->cu_seqlens_q()[0] = 0;
  for (int r = 0; r < shape.num_seqs; ++r) {  // what fill_metadata will write once the token at `pos` is known
    const Sequence& seq = *batch.items[r].seq;
    const int pos = seq.size();
    fill_sequence(r, seq, pos, pos + 1, r);
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

// `batch` is a plain decode batch (run_plain's), so each of its rows computes one token and samples.
bool ModelRunner::is_assumed_batch(const PlainStep& early, const ScheduledBatch& batch) const {
  return std::equal(batch.items.begin(), batch.items.end(), early.assumed.begin(), early.assumed.end(),
                    [](const ScheduledSequence& item, const std::pair<int64_t, int>& assumed) {
                      return item.seq->seq_id == assumed.first && item.seq->num_computed_tokens == assumed.second;
                    });
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
