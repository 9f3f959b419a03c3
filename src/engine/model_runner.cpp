#include "engine/model_runner.h"

#include <algorithm>

#include "engine/decode_graphs.h"
#include "engine/token_sampler.h"

namespace nanovllm {

namespace {
constexpr size_t kGiB = size_t{1} << 30;

int ceil_div(int a, int b) { return (a + b - 1) / b; }
}  // namespace

ModelRunner::ModelRunner(const EngineConfig& config, const ModelConfig& model_config, std::unique_ptr<Backend> backend,
                         WeightSource& weights, Communicator* comm)
    : config_(config),
      model_config_(model_config),
      shard_(ShardLayout::of(model_config, comm ? comm->rank() : 0, comm ? comm->size() : 1)),
      comm_(comm),
      backend_(std::move(backend)) {
  const int max_logits_rows = config.max_num_seqs;
  BackendLimits limits;
  limits.max_num_tokens = config.max_num_batched_tokens;
  limits.max_num_seqs = config.max_num_seqs;
  limits.max_model_len = config.max_model_len;
  limits.max_logits_rows = max_logits_rows;
  limits.num_heads = shard_.num_heads;
  limits.num_kv_heads = shard_.num_kv_heads;
  limits.head_dim = model_config.head_dim;
  limits.vocab_size = model_config.vocab_size;
  limits.kv_block_size = config.kvcache_block_size;
  limits.fp8_kv_cache = config.fp8_kv_cache();
  backend_->reserve(limits);

  model_ = std::make_unique<Qwen3Model>(model_config, shard_, comm_, *backend_, weights, config.max_num_batched_tokens,
                                        max_logits_rows, config.max_model_len);
  StepLimits step_limits;
  step_limits.max_num_tokens = config.max_num_batched_tokens;
  step_limits.max_num_seqs = config.max_num_seqs;
  step_limits.max_blocks_per_seq = ceil_div(config.max_model_len, config.kvcache_block_size);
  step_limits.max_logits_rows = max_logits_rows;
  meta_ = std::make_unique<StepMetadata>(*backend_, step_limits);
  sampler_ = std::make_unique<TokenSampler>(*backend_, *model_, *meta_, model_config, shard_, comm_, max_logits_rows);

  allocate_kv_cache(config.fp8_kv_cache() ? load_kv_cache_scales(weights, model_config) : std::vector<KvCacheScale>{});
  warmup();
  if (!config.enforce_eager && backend_->can_capture_graphs()) capture_graphs();
  async_scheduling_ = config.async_scheduling && comm_ == nullptr;
  if (async_scheduling_) {
    sampled_host_ = backend_->allocate_host(2 * static_cast<size_t>(config_.max_num_seqs) * sizeof(int32_t));
    for (auto& mark : sampled_) mark = backend_->create_mark();
  }
}

ModelRunner::~ModelRunner() {
  try {
    drop_early();  // its work reads buffers freed below
  } catch (...) {
    // nothing to do: no throwing from a destructor
  }
}

DType ModelRunner::kv_cache_dtype() const {
  return config_.fp8_kv_cache() ? DType::F8_E4M3 : backend_->compute_dtype();
}

size_t ModelRunner::kv_block_bytes() const {
  return 2ull * model_config_.num_hidden_layers * config_.kvcache_block_size * shard_.num_kv_heads *
         model_config_.head_dim * dtype_size(kv_cache_dtype());
}

// As nano-vLLM: on a GPU the cache takes what is left of gpu_memory_utilization × total once weights and
// every workspace are allocated (all of ours are preallocated, so "used" is already the peak); on the CPU a
// fixed budget, capped at what max_num_seqs full-length sequences could ever use.
void ModelRunner::allocate_kv_cache(const std::vector<KvCacheScale>& kv_scales) {
  const size_t block_bytes = kv_block_bytes();
  const int blocks_per_seq = ceil_div(config_.max_model_len, config_.kvcache_block_size);
  long long blocks = config_.num_kvcache_blocks;
  if (blocks <= 0) {
    if (backend_->is_device()) {
      const Backend::MemoryInfo mem = backend_->memory_info();
      const double budget = static_cast<double>(mem.total_bytes) * config_.gpu_memory_utilization -
                            static_cast<double>(mem.total_bytes - mem.free_bytes);
      blocks = budget > 0 ? static_cast<long long>(budget / static_cast<double>(block_bytes)) : 0;
      if (blocks <= 0)
        throw InvalidInput("no GPU memory left for the KV cache at gpu_memory_utilization " +
                           std::to_string(config_.gpu_memory_utilization) + " (weights and buffers use " +
                           std::to_string((mem.total_bytes - mem.free_bytes) / (1 << 20)) + " MiB)");
    } else {
      blocks = static_cast<long long>(config_.cpu_kvcache_space_gib * kGiB / block_bytes);
      blocks = std::min<long long>(blocks, static_cast<long long>(blocks_per_seq) * config_.max_num_seqs);
      blocks = std::max<long long>(blocks, 1);
    }
  }
  // Ranks differ a little in free memory (rank 0 also holds the gathered logits): all take the smallest.
  if (comm_) blocks = comm_->min_over_ranks(blocks);
  num_kvcache_blocks_ = static_cast<int>(blocks);
  const int64_t nb = num_kvcache_blocks_, bs = config_.kvcache_block_size;
  const int64_t nkv = shard_.num_kv_heads, d = model_config_.head_dim;
  const DType dtype = kv_cache_dtype();
  for (int l = 0; l < model_config_.num_hidden_layers; ++l) {
    KvCacheLayer layer;
    for (Tensor* t : {&layer.k, &layer.v}) {
      Tensor probe(nullptr, dtype, {nb, bs, nkv, d});
      kv_storage_.push_back(backend_->allocate(probe.bytes()));
      *t = kv_storage_.back().view(dtype, {nb, bs, nkv, d});
    }
    if (!kv_scales.empty()) {
      layer.k_scale = kv_scales[static_cast<size_t>(l)].k;
      layer.v_scale = kv_scales[static_cast<size_t>(l)].v;
    }
    kv_cache_.push_back(layer);
  }
  kv_cache_bytes_ = static_cast<size_t>(num_kvcache_blocks_) * block_bytes;
}

// One forward at the largest step shape, so that lazy initialisation (modules, GEMM heuristics) happens
// before the first request; the CPU needs none.
void ModelRunner::warmup() {
  if (!backend_->is_device()) return;
  const int T = config_.max_num_batched_tokens;
  const int len = std::min(T, config_.max_model_len);
  const int num_seqs = std::min(ceil_div(T, len), config_.max_num_seqs);
  const int blocks_per_seq = meta_->limits().max_blocks_per_seq;
  meta_->begin_fill();
  int* cu = meta_->cu_seqlens_q();
  cu[0] = 0;
  int t = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const int n = std::min(len, T - t);
    for (int i = 0; i < n; ++i, ++t) {
      meta_->input_ids()[t] = (t * 7919) % model_config_.vocab_size;
      meta_->positions()[t] = i;
      meta_->slot_mapping()[t] = -1;  // no cache writes
    }
    cu[s + 1] = t;
    meta_->seq_lens_k()[s] = n;
    for (int b = 0; b < blocks_per_seq; ++b)
      meta_->block_tables()[s * blocks_per_seq + b] = (s * blocks_per_seq + b) % num_kvcache_blocks_;
  }
  meta_->upload(num_seqs, t);
  model_->forward(step_tensors({t, num_seqs, len, len, false}), kv_cache_);
  backend_->synchronize();
}

void ModelRunner::pad_decode_rows(int from, int to) {
  for (int s = from; s < to; ++s) {
    meta_->input_ids()[s] = 0;
    meta_->positions()[s] = 0;
    meta_->slot_mapping()[s] = -1;
    meta_->cu_seqlens_q()[s + 1] = meta_->cu_seqlens_q()[from];
    meta_->seq_lens_k()[s] = 0;
    meta_->logits_rows()[s] = s;  // block tables are left as they are: a sequence without keys reads none
  }
}

StepTensors ModelRunner::step_tensors(const StepShape& shape) const {
  StepTensors step;
  step.num_tokens = shape.num_tokens;
  step.input_ids = meta_->input_ids_tensor(shape.num_tokens);
  step.positions = meta_->positions_tensor(shape.num_tokens);
  step.slot_mapping = meta_->slot_mapping_tensor(shape.num_tokens);
  step.attention = meta_->attention(shape.num_seqs, shape.max_seqlen_q, shape.max_seqlen_k, config_.kvcache_block_size,
                                    shape.decode_only, shape.num_decode_rows);
  return step;
}

// Decode steps as graphs per batch bucket. A graph replays the model and the lm_head over fixed metadata
// addresses (under tensor parallelism the lm_head of this rank's vocabulary chunk: whether the chunks are
// gathered or sampled where they are is decided per step); attention grids are sized for max_model_len keys
// and read the real lengths from device memory, so one graph serves every context length. A decode step takes
// one token a sequence, so its batch is bounded by the token budget too (the token-sized buffers hold no more).
void ModelRunner::capture_graphs() {
  const int max_bs = std::min({config_.max_num_seqs, config_.max_num_batched_tokens, 512});
  meta_->begin_fill();
  meta_->cu_seqlens_q()[0] = 0;
  pad_decode_rows(0, max_bs);
  meta_->upload(max_bs, max_bs);
  graphs_ = std::make_unique<DecodeGraphs>(*backend_, DecodeGraphs::buckets_up_to(max_bs), [this](int b) {
    model_->forward(step_tensors({b, b, 1, config_.max_model_len, true}), kv_cache_);
    sampler_->compute_logits(b);
  });
}

StepOutput ModelRunner::run(const ScheduledBatch& batch) {
  if (batch.items.empty()) return {};
  if (async_scheduling_ && is_plain_decode(batch)) return run_plain(batch);
  if (early_ && batch.has_prefill() && batch.num_decode_rows > 0) {
    const auto decode_rows = std::span(batch.items).first(static_cast<size_t>(batch.num_decode_rows));
    if (auto rows = rows_in_early(decode_rows)) return run_chunks_beside_early(batch, *rows);
  }
  drop_early();
  return run_batch(batch);
}

StepOutput ModelRunner::run_batch(const ScheduledBatch& batch) {
  const StepShape shape = fill_metadata(batch);
  // Every decode sequence samples, so a graph's logits rows are those of the batch.
  const int bucket = shape.decode_only && graphs_ ? graphs_->bucket_for(shape.num_seqs) : 0;
  StepOutput out;
  out.launched = launch(shape, bucket);
  sampler_->run(batch, /*logits_ready=*/bucket > 0, out);
  return out;
}

ModelRunner::StepShape ModelRunner::fill_metadata(const ScheduledBatch& batch) {
  StepShape shape;
  shape.num_seqs = static_cast<int>(batch.items.size());
  int num_samples = 0;
  meta_->begin_fill();
  meta_->cu_seqlens_q()[0] = 0;
  for (int s = 0; s < shape.num_seqs; ++s) {
    const ScheduledSequence& item = batch.items[s];
    const int end = item.seq->num_computed_tokens + item.num_new_tokens;
    shape.num_tokens = fill_sequence(s, *item.seq, item.seq->num_computed_tokens, end, shape.num_tokens);
    shape.max_seqlen_q = std::max(shape.max_seqlen_q, item.num_new_tokens);
    shape.max_seqlen_k = std::max(shape.max_seqlen_k, end);
    if (item.samples) fill_sampling_row(num_samples++, shape.num_tokens - 1, item.seq->params, end);
  }
  shape.decode_only = shape.max_seqlen_q == 1;
  shape.num_decode_rows = shape.decode_only ? 0 : batch.num_decode_rows;
  return shape;
}

int ModelRunner::fill_sequence(int s, const Sequence& seq, int start, int end, int first_row) {
  const int bs = config_.kvcache_block_size;
  const int blocks_per_seq = meta_->limits().max_blocks_per_seq;
  int t = first_row;
  for (int p = start; p < end; ++p, ++t) {
    meta_->input_ids()[t] = p < seq.size() ? seq.token_ids[p] : 0;
    meta_->positions()[t] = p;
    meta_->slot_mapping()[t] = seq.block_table[p / bs] * bs + p % bs;
  }
  meta_->cu_seqlens_q()[s + 1] = t;
  meta_->seq_lens_k()[s] = end;
  int32_t* table = meta_->block_tables() + static_cast<size_t>(s) * blocks_per_seq;
  const int nblocks = static_cast<int>(seq.block_table.size());
  for (int b = 0; b < blocks_per_seq; ++b) table[b] = b < nblocks ? seq.block_table[b] : -1;
  return t;
}

void ModelRunner::fill_sampling_row(int r, int token_row, const SamplingParams& sp, int step) {
  meta_->logits_rows()[r] = token_row;
  meta_->temperature()[r] = sp.temperature;
  meta_->top_k()[r] = sp.top_k;
  meta_->top_p()[r] = sp.top_p;
  meta_->min_p()[r] = sp.min_p;
  meta_->seed()[r] = static_cast<int64_t>(sp.seed.value_or(0));
  meta_->sample_step()[r] = step;  // index the sampled token will have
}

std::chrono::steady_clock::time_point ModelRunner::launch(const StepShape& shape, int bucket,
                                                          const int32_t* device_input_ids) {
  if (bucket > 0) pad_decode_rows(shape.num_seqs, bucket);
  meta_->upload(bucket > 0 ? bucket : shape.num_seqs, bucket > 0 ? bucket : shape.num_tokens, device_input_ids);
  const auto launched = std::chrono::steady_clock::now();
  if (bucket > 0) {
    graphs_->replay(bucket);
    return launched;
  }
  model_->forward(step_tensors(shape), kv_cache_);
  return launched;
}

}  // namespace nanovllm
