#pragma once
// The request-level engine: tokenizes, owns the request table, runs scheduler steps on the model runner,
// detokenizes and applies stop strings. A server drives add_request / step / abort; LLM::generate loops it.
// Not thread-safe: one thread drives it (AsyncEngine's loop thread, or LLM::generate's caller).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model_executor.h"
#include "engine/progress_bar.h"
#include "engine/scheduler.h"
#include "model/hf_config.h"
#include "nanovllm/config.h"
#include "nanovllm/engine_stats.h"
#include "nanovllm/outputs.h"

namespace nanovllm {

class Tokenizer;
class StreamingDetokenizer;

struct StepStats {
  bool is_prefill = false;
  int num_tokens = 0;       // tokens computed (prefill) or sequences decoded
  int num_decode_rows = 0;  // sequences that took one decode token; in a prefill step: a mixed step
  double seconds = 0.0;
  // Host work: before the model was launched (scheduling, metadata; for a step launched early, its scheduling
  // only) and after run() returned (postprocessing, detokenizing). The device idles through it unless the next
  // step was launched early.
  double host_before_launch = 0.0, host_after_run = 0.0;
  bool sampled_on_shards = false;  // tensor parallelism: tokens were sampled where the logits are
  bool launched_early = false;     // asynchronous scheduling: launched during the previous step
};

// What the progress bar is told of a step: its stats and the requests step() returned as finished in it.
StepProgress step_progress(const StepStats& stats, const std::vector<RequestOutput>& finished);

class LLMEngine {
 public:
  explicit LLMEngine(EngineConfig config);
  virtual ~LLMEngine();

  // Validates and queues a request; throws InvalidInput naming what is wrong with it.
  int64_t add_request(const Prompt& prompt, SamplingParams params);
  // Runs one scheduler step; returns what it added to each request that advanced (a new token, text, or its
  // end). Every request ends with exactly one finished delta. Virtual so that a wrapper or a test can stand
  // in for a step.
  virtual std::vector<RequestDelta> step_deltas();
  // The same step for callers that want whole outputs: the requests that finished in it, their deltas summed.
  // Drive an engine with one of the two, not both.
  std::vector<RequestOutput> step();
  // Finishes a request wherever it is (finish_reason "abort"); its output comes from the next step(), and
  // is_finished() stays false until then.
  void abort(int64_t request_id);
  bool is_finished() const;

  // Chat messages → prompt text through the model's chat template (needs tokenizer_config.json's template).
  // Keys keep their order (tool definitions render as given). The tokenizer's bos/eos/pad tokens are passed
  // as template variables, as transformers does.
  std::string apply_chat_template(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  bool add_generation_prompt, const nlohmann::ordered_json& extra) const;

  const EngineConfig& config() const { return config_; }
  const ModelConfig& model_config() const { return model_config_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const StepStats& last_step() const { return last_step_; }
  std::string backend_name() const;
  Backend& runner_backend() { return executor_->backend(); }  // rank 0's
  int num_kvcache_blocks() const { return executor_->num_kvcache_blocks(); }
  size_t kv_cache_bytes() const { return executor_->kv_cache_bytes(); }  // all ranks
  size_t weight_bytes() const { return executor_->weight_bytes(); }      // all ranks
  double startup_seconds() const { return startup_seconds_; }
  int64_t num_preemptions() const { return scheduler_->num_preemptions(); }
  // Load, KV-cache use and the counters below; cheap (a few reads).
  EngineStats stats() const;
  // Prefix-cache and preemption counts since the engine started.
  RunCounters run_counters() const {
    const BlockManager& blocks = scheduler_->block_manager();
    return {blocks.num_prefix_queried_tokens(), blocks.num_prefix_hit_tokens(), scheduler_->num_preemptions()};
  }

 private:
  struct Request;
  // The logprobs of the step's sampled and prompt tokens, into their requests' outputs.
  void record_logprobs(const ScheduledBatch& batch, const StepOutput& out);
  // The sampled tokens' text, for every sequence that got one (finished or not); a completed stop string cuts
  // the text and finishes the request.
  void detokenize(const ScheduledBatch& batch, const std::vector<int32_t>& sampled);
  // Records the first scheduling of each request in the batch (queue time, prefix-cache hits).
  void note_scheduled(const ScheduledBatch& batch, EngineClock::time_point when);
  // What the request gained since its last delta; `finished` flushes the held-back text.
  RequestDelta take_delta(Request& req, const Sequence& seq, bool finished, EngineClock::time_point when);

  EngineConfig config_;
  ModelConfig model_config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ModelExecutor> executor_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<int64_t, std::unique_ptr<Request>> requests_;
  std::unordered_map<int64_t, RequestOutput> collected_;  // step()'s outputs of unfinished requests
  int64_t next_request_id_ = 0;
  StepStats last_step_;
  double startup_seconds_ = 0.0;
};

}  // namespace nanovllm
