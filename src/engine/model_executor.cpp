#include "engine/model_executor.h"

#include "engine/device_support.h"

namespace nanovllm {

ModelExecutor::ModelExecutor(const EngineConfig& config, const ModelConfig& model_config, WeightSource& weights) {
  const int size = config.tensor_parallel_size;
  ShardLayout::of(model_config, 0, size);  // a model the ranks cannot split fails here, before any GPU work
  RankBackends ranks = make_rank_backends(config.device, size);
  runners_.resize(size);
  if (size == 1) {
    runners_[0] = std::make_unique<ModelRunner>(config, model_config, std::move(ranks.backends[0]), weights);
    return;
  }
  comms_ = std::move(ranks.comms);
  threads_ = std::make_unique<RankThreads>(size);
  on_all_ranks([&](int r) {
    runners_[r] =
        std::make_unique<ModelRunner>(config, model_config, std::move(ranks.backends[r]), weights, &comms_->rank(r));
  });
}

ModelExecutor::~ModelExecutor() = default;

void ModelExecutor::on_all_ranks(const std::function<void(int)>& task) {
  if (!failure_.empty()) throw EngineError("the tensor-parallel group failed earlier: " + failure_);
  try {
    threads_->run(task, [this](const std::string& why) { comms_->abort(why); });
  } catch (const std::exception& e) {
    failure_ = e.what();
    throw;
  }
}

StepOutput ModelExecutor::run(const ScheduledBatch& batch) {
  if (runners_.size() == 1) return runners_[0]->run(batch);
  StepOutput out;
  on_all_ranks([&](int r) {
    StepOutput mine = runners_[r]->run(batch);
    comms_->rank(r).check_health();
    if (r == 0) out = std::move(mine);
  });
  return out;
}

size_t ModelExecutor::kv_cache_bytes() const {
  size_t total = 0;
  for (const auto& r : runners_) total += r->kv_cache_bytes();
  return total;
}

size_t ModelExecutor::weight_bytes() const {
  size_t total = 0;
  for (const auto& r : runners_) total += r->model().weight_bytes();
  return total;
}

}  // namespace nanovllm
