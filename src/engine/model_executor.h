#pragma once
// The model on its devices, as the engine sees it: one ModelRunner, or one per tensor-parallel rank running
// every step in lock-step (rank 0 on the calling thread, the others on their RankThreads) over a
// communicator group. A failure on any rank aborts the group, so no rank waits for it forever; the executor
// then refuses further steps with that failure's message.
#include <memory>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "parallel/communicator.h"
#include "parallel/rank_threads.h"

namespace nanovllm {

class ModelExecutor {
 public:
  ModelExecutor(const EngineConfig& config, const ModelConfig& model_config, WeightSource& weights);
  ~ModelExecutor();

  StepOutput run(const ScheduledBatch& batch);

  int tensor_parallel_size() const { return static_cast<int>(runners_.size()); }
  int num_kvcache_blocks() const { return runners_[0]->num_kvcache_blocks(); }
  size_t kv_cache_bytes() const;                         // over all ranks
  size_t weight_bytes() const;                           // over all ranks
  Backend& backend() { return runners_[0]->backend(); }  // rank 0's
  std::string communicator() const { return comms_ ? comms_->describe() : ""; }

 private:
  // Runs task on every rank; on a failure, aborts the group and remembers why before rethrowing.
  void on_all_ranks(const std::function<void(int)>& task);

  // Declaration order is teardown order reversed: runners (graphs, buffers, streams) go before the
  // communicators they enqueue on, the threads last.
  std::unique_ptr<RankThreads> threads_;
  std::unique_ptr<CommunicatorGroup> comms_;
  std::vector<std::unique_ptr<ModelRunner>> runners_;
  std::string failure_;
};

}  // namespace nanovllm
