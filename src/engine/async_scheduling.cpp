// Asynchronous scheduling: ModelRunner launches a plain decode step's successor before the step's sampled ids reach
// the host, so the device does not idle while the host reads them, applies them and schedules again
// (docs/online_engine.md, "Asynchronous scheduling"). The successor assumes the same sequences, each one
// token further, with the input ids taken on the device from the step's samples. The next run() adopts it when the
// scheduler's decode rows are among its rows: sequences that finished, were aborted or preempted in between only
// have their tokens dropped, and prompt chunks scheduled beside the decode rows run as a step of their own. A batch
// of anything else drops it. Dropping a step or a row is safe by queue order: the early step wrote only each
// sequence's next cache slot, in a block that is not full yet (so no prefix-cache entry holds it), and whatever
// runs later writes after it.
#include <algorithm>
#include <numeric>

#include "engine/decode_graphs.h"
#include "engine/model_runner.h"
#include "engine/token_sampler.h"

namespace nanovllm {

bool ModelRunner::is_plain_decode(const ScheduledBatch& batch) const {
  return !batch.has_prefill() && sampler_->samples_plainly(batch);
}

StepOutput ModelRunner::run_plain(const ScheduledBatch& batch) {
  PlainStep current;
  std::vector<int> rows;
  std::optional<std::vector<int>> early_rows = early_ ? rows_in_early(batch.items) : std::nullopt;
  if (early_rows) {
    current = std::move(*early_);
    early_.reset();
    current.launched = std::chrono::steady_clock::now();  // it was handed over before this step began
    rows = std::move(*early_rows);
  } else {
    drop_early();  // both slots are free now
    current = start_plain(batch, 0);
    rows.resize(batch.items.size());
    std::iota(rows.begin(), rows.end(), 0);
  }
  if (next_step_is_known(batch)) early_ = start_next_early(batch, rows, 1 - current.slot);
  StepOutput out = finish(current, rows);
  out.launched_early = early_rows.has_value();
  return out;
}

StepOutput ModelRunner::run_chunks_beside_early(const ScheduledBatch& batch, const std::vector<int>& rows) {
  const PlainStep early = std::move(*early_);
  early_.reset();
  ScheduledBatch chunks;
  chunks.items.assign(batch.items.begin() + batch.num_decode_rows, batch.items.end());
  chunks.num_tokens = batch.num_tokens - batch.num_decode_rows;
  StepOutput out = run_batch(chunks);
  // The decode rows come first in the batch, and each samples (the early step's rows sample plainly).
  const StepOutput decoded = finish(early, rows);
  out.sampled.insert(out.sampled.begin(), decoded.sampled.begin(), decoded.sampled.end());
  out.sampled_logprobs.insert(out.sampled_logprobs.begin(), rows.size(), PositionLogprobs{});
  for (StepOutput::PromptEntry& entry : out.prompt_logprobs) entry.item += batch.num_decode_rows;
  out.launched_early = true;
  return out;
}

ModelRunner::PlainStep ModelRunner::start_plain(const ScheduledBatch& batch, int slot) {
  const StepShape shape = fill_metadata(batch);
  const int bucket = graphs_ ? graphs_->bucket_for(shape.num_seqs) : 0;
  PlainStep step;
  step.slot = slot;
  step.launched = launch(shape, bucket);
  sampler_->enqueue_plain(shape.num_seqs, bucket > 0, sampled_slot(slot));
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

ModelRunner::PlainStep ModelRunner::start_next_early(const ScheduledBatch& batch, const std::vector<int>& id_rows,
                                                     int slot) {
  StepShape shape;
  shape.num_seqs = shape.num_tokens = static_cast<int>(batch.items.size());
  shape.max_seqlen_q = 1;
  shape.decode_only = true;
  PlainStep step;
  step.slot = slot;
  meta_->begin_fill();
  meta_->cu_seqlens_q()[0] = 0;
  for (int r = 0; r < shape.num_seqs; ++r) {  // what fill_metadata will write once the token at `pos` is known
    const Sequence& seq = *batch.items[r].seq;
    const int pos = seq.size();
    fill_sequence(r, seq, pos, pos + 1, r);
    meta_->input_ids()[r] = -1 - id_rows[static_cast<size_t>(r)];  // the upload takes it from that sampled row
    fill_sampling_row(r, r, seq.params, pos + 1);
    shape.max_seqlen_k = std::max(shape.max_seqlen_k, pos + 1);
    step.assumed.emplace_back(seq.seq_id, pos);
  }
  const int bucket = graphs_ ? graphs_->bucket_for(shape.num_seqs) : 0;
  step.launched = launch(shape, bucket, sampler_->sampled_ids());
  sampler_->enqueue_plain(shape.num_seqs, bucket > 0, sampled_slot(slot));
  sampled_[slot]->record();
  return step;
}

std::optional<std::vector<int>> ModelRunner::rows_in_early(std::span<const ScheduledSequence> items) const {
  const std::vector<std::pair<int64_t, int>>& assumed = early_->assumed;
  std::vector<int> rows;
  rows.reserve(items.size());
  size_t r = 0;
  for (const ScheduledSequence& item : items) {
    while (r < assumed.size() && assumed[r].first != item.seq->seq_id) ++r;  // rows of sequences that left
    if (r == assumed.size() || assumed[r].second != item.seq->num_computed_tokens) return std::nullopt;
    rows.push_back(static_cast<int>(r++));
  }
  return rows;
}

void ModelRunner::drop_early() {
  if (!early_) return;
  sampled_[early_->slot]->wait();
  early_.reset();
}

int32_t* ModelRunner::sampled_slot(int slot) const {
  return static_cast<int32_t*>(sampled_host_.data()) + static_cast<size_t>(slot) * config_.max_num_seqs;
}

StepOutput ModelRunner::finish(const PlainStep& step, const std::vector<int>& rows) {
  sampled_[step.slot]->wait();
  const int32_t* ids = sampled_slot(step.slot);
  StepOutput out;
  out.sampled.reserve(rows.size());
  for (int r : rows) out.sampled.push_back(ids[r]);
  out.sampled_logprobs.resize(rows.size());
  out.launched = step.launched;
  return out;
}

}  // namespace nanovllm
