#pragma once
// Runs one scheduled step on one backend: fills the step's flat metadata, runs the model (eagerly, or a
// replayed decode graph), then hands the logits rows to its TokenSampler, which picks the next token of every
// sequence that finished its prompt chunk and computes the logprobs requests asked for. Owns the KV cache.
// Under tensor parallelism there is one runner per rank, all running the same steps at once; each computes
// its shard, and only rank 0's (the driver's) tokens and logprobs exist.
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "engine/scheduler.h"
#include "engine/step_metadata.h"
#include "engine/step_output.h"
#include "model/kv_cache_scales.h"
#include "model/qwen3.h"
#include "nanovllm/config.h"

namespace nanovllm {

class DecodeGraphs;
class TokenSampler;

class ModelRunner {
 public:
  // comm: null for a single rank.
  ModelRunner(const EngineConfig& config, const ModelConfig& model_config, std::unique_ptr<Backend> backend,
              WeightSource& weights, Communicator* comm = nullptr);
  ~ModelRunner();

  // On ranks other than 0 the tokens and logprobs are empty (only launched and sampled_on_shards are set).
  // With asynchronous scheduling a plain decode step may come back with its successor already launched, which
  // the next run() adopts if it is the batch the scheduler then makes (async_scheduling.cpp).
  StepOutput run(const ScheduledBatch& batch);

  int num_kvcache_blocks() const { return num_kvcache_blocks_; }
  size_t kv_cache_bytes() const { return kv_cache_bytes_; }
  const Qwen3Model& model() const { return *model_; }
  Backend& backend() { return *backend_; }

 private:
  // A step's extent, as the metadata fill found it.
  struct StepShape {
    int num_tokens = 0, num_seqs = 0, max_seqlen_q = 0, max_seqlen_k = 0;
    bool decode_only = false;  // every sequence has one query row
    int num_decode_rows = 0;   // a mixed step: its first sequences are decode rows
  };

  // FP8 caches take their per-layer scales from kv_scales (empty otherwise).
  void allocate_kv_cache(const std::vector<KvCacheScale>& kv_scales);
  DType kv_cache_dtype() const;
  void warmup();
  void capture_graphs();
  // The host metadata of the batch: tokens, positions, cache slots, block tables, and the logits row and
  // sampling controls of every item that samples.
  StepShape fill_metadata(const ScheduledBatch& batch);
  // Sequence s's rows for positions [start, end) from token row `first_row` on; returns the row after its last. A
  // position past the sequence's tokens (an early step's, async_scheduling.cpp) gets input id 0 here, which the
  // early step replaces.
  int fill_sequence(int s, const Sequence& seq, int start, int end, int first_row);
  // Sampling row r: the logits of token row `token_row`, sampled with the request's controls as token `step`.
  void fill_sampling_row(int r, int token_row, const SamplingParams& sp, int step);
  // Fills token rows [from, to) of a decode step's metadata, and as many sequences, as padding up to a graph's
  // bucket: the tokens write no cache, and the sequences have no query row and no keys, so decode attention skips
  // them. (Padding sequences of one key and one row were attended like real ones, and a CTA's range walked them one
  // by one, ~1 us a piece: Qwen3-0.6B at batch 17, 15 of them, took 1.92 ms a step in its bucket of 32 where batch
  // 32 took 1.52, H100.)
  void pad_decode_rows(int from, int to);
  // Uploads the metadata and launches the model: a replayed decode graph (bucket > 0) or the eager forward.
  // Returns when the work was handed to the device. device_input_ids: input ids written as -1 - r on the host take
  // row r of it (StepMetadata::upload).
  std::chrono::steady_clock::time_point launch(const StepShape& shape, int bucket,
                                               const int32_t* device_input_ids = nullptr);
  // Device views of the step metadata for a step of this shape.
  StepTensors step_tensors(const StepShape& shape) const;
  size_t kv_block_bytes() const;

  // --- Asynchronous scheduling (async_scheduling.cpp, docs/online_engine.md) ---
  // A plain decode step in flight (every row samples with nothing but its token to report): its ids land in host
  // slot `slot` once its mark is reached.
  struct PlainStep {
    int slot = 0;
    std::chrono::steady_clock::time_point launched;
    std::vector<std::pair<int64_t, int>> assumed;  // an early step: each row's (sequence id, position computed)
  };
  // The synchronous path: fills, launches and samples the batch, and waits for its outputs.
  StepOutput run_batch(const ScheduledBatch& batch);
  bool is_plain_decode(const ScheduledBatch& batch) const;
  StepOutput run_plain(const ScheduledBatch& batch);
  PlainStep start_plain(const ScheduledBatch& batch, int slot);
  // Whether the step after `batch` is known before its ids are: the same sequences, each one token further, none
  // finishing by length and none needing a new KV block.
  bool next_step_is_known(const ScheduledBatch& batch) const;
  // Launches that step, its input ids taken on the device from the samples of the step in flight: row i's from
  // that step's row id_rows[i].
  PlainStep start_next_early(const ScheduledBatch& batch, const std::vector<int>& id_rows, int slot);
  // Where decode rows `items` are among the early step's rows (each a row computing the same position, in the same
  // order, rows of sequences that left in between skipped); nullopt if some item is not there.
  std::optional<std::vector<int>> rows_in_early(std::span<const ScheduledSequence> items) const;
  // A mixed step whose decode rows the early step computed (at `rows`): its prompt chunks run as a step of their
  // own, and the decode rows take the early step's tokens.
  StepOutput run_chunks_beside_early(const ScheduledBatch& batch, const std::vector<int>& rows);
  // Waits for an early step no batch adopted (its slot is then free) and forgets it.
  void drop_early();
  // The step's sampled ids of `rows`, in that order.
  StepOutput finish(const PlainStep& step, const std::vector<int>& rows);
  int32_t* sampled_slot(int slot) const;  // host slot `slot` of sampled_host_

  EngineConfig config_;
  ModelConfig model_config_;
  ShardLayout shard_;
  Communicator* comm_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Qwen3Model> model_;
  std::unique_ptr<StepMetadata> meta_;
  std::unique_ptr<TokenSampler> sampler_;
  std::vector<Buffer> kv_storage_;
  std::vector<KvCacheLayer> kv_cache_;
  int num_kvcache_blocks_ = 0;
  size_t kv_cache_bytes_ = 0;
  std::unique_ptr<DecodeGraphs> graphs_;
  bool async_scheduling_ = false;  // config.async_scheduling on a single rank
  std::optional<PlainStep> early_;
  Buffer sampled_host_;                    // two slots of max_num_seqs ids (pinned on CUDA)
  std::unique_ptr<QueueMark> sampled_[2];  // recorded after each slot's copy
};

}  // namespace nanovllm
