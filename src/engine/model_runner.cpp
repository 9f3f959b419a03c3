#include "engine/model_runner.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "engine/device_support.h"

namespace nanovllm {

namespace {
constexpr size_t kGiB = size_t{1} << 30;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Sampling with a filter that looks at the whole vocabulary: the filters Backend::sample_shard cannot apply.
bool needs_whole_row(const SamplingParams& sp, int vocab) {
  const bool filtered = (sp.top_k > 0 && sp.top_k < vocab) || sp.top_p < 1.0f || sp.min_p > 0.0f;
  return sp.temperature > 0.0f && filtered;
}
}  // namespace

ModelRunner::ModelRunner(const EngineConfig& config, const ModelConfig& model_config, std::unique_ptr<Backend> backend,
                         WeightSource& weights, Communicator* comm)
    : config_(config),
      model_config_(model_config),
      shard_(ShardLayout::of(model_config, comm ? comm->rank() : 0, comm ? comm->size() : 1)),
      comm_(comm),
      driver_(shard_.rank == 0),
      backend_(std::move(backend)) {
  max_logits_rows_ = config.max_num_seqs;
  BackendLimits limits;
  limits.max_num_tokens = config.max_num_batched_tokens;
  limits.max_num_seqs = config.max_num_seqs;
  limits.max_model_len = config.max_model_len;
  limits.max_logits_rows = max_logits_rows_;
  limits.num_heads = shard_.num_heads;
  limits.num_kv_heads = shard_.num_kv_heads;
  limits.head_dim = model_config.head_dim;
  limits.vocab_size = model_config.vocab_size;
  backend_->reserve(limits);

  model_ = std::make_unique<Qwen3Model>(model_config, shard_, comm_, *backend_, weights, config.max_num_batched_tokens,
                                        max_logits_rows_, config.max_model_len);
  StepLimits step_limits;
  step_limits.max_num_tokens = config.max_num_batched_tokens;
  step_limits.max_num_seqs = config.max_num_seqs;
  step_limits.max_blocks_per_seq = ceil_div(config.max_model_len, config.kvcache_block_size);
  step_limits.max_logits_rows = max_logits_rows_;
  meta_ = std::make_unique<StepMetadata>(*backend_, step_limits);

  const size_t R = max_logits_rows_, V = model_config.vocab_size, K = SamplingParams::kMaxLogprobs;
  rows_buf_ = backend_->allocate(R * 4);  // every rank makes the lm_head calls
  if (driver_) {                          // only the driver samples and scores
    logits_buf_ = backend_->allocate(R * V * 4);
    sampled_buf_ = backend_->allocate(R * 4);
    targets_buf_ = backend_->allocate(R * 4);
    target_lp_buf_ = backend_->allocate(R * 4);
    top_ids_buf_ = backend_->allocate(R * K * 4);
    top_lp_buf_ = backend_->allocate(R * K * 4);
    ban_rows_buf_ = backend_->allocate(R * kBansPerRow * 4);
    ban_tokens_buf_ = backend_->allocate(R * kBansPerRow * 4);
  }
  if (comm_) {
    picks_buf_ = backend_->allocate(R * 4 * 4);
    if (driver_) {
      gathered_picks_buf_ = backend_->allocate(static_cast<size_t>(comm_->size()) * R * 4 * 4);
      gathered_picks_host_ = backend_->allocate_host(gathered_picks_buf_.bytes());
    }
    zero_temperature_buf_ = backend_->allocate(R * 4);
    const std::vector<float> zeros(R, 0.0f);
    backend_->upload(zeros.data(), zero_temperature_buf_.data(), R * 4);
  }

  allocate_kv_cache();
  warmup();
  if (!config.enforce_eager) capture_graphs();
}

ModelRunner::~ModelRunner() = default;

size_t ModelRunner::kv_block_bytes() const {
  return 2ull * model_config_.num_hidden_layers * config_.kvcache_block_size * shard_.num_kv_heads *
         model_config_.head_dim * dtype_size(backend_->compute_dtype());
}

Tensor ModelRunner::logits_view(int n) const {
  return driver_ ? logits_buf_.view(DType::F32, {n, model_config_.vocab_size}) : Tensor{};
}

// As nano-vLLM: on a GPU the cache takes what is left of gpu_memory_utilization × total once weights and
// every workspace are allocated (all of ours are preallocated, so "used" is already the peak); on the CPU a
// fixed budget, capped at what max_num_seqs full-length sequences could ever use.
void ModelRunner::allocate_kv_cache() {
  const size_t block_bytes = kv_block_bytes();
  const int blocks_per_seq = ceil_div(config_.max_model_len, config_.kvcache_block_size);
  long long blocks = config_.num_kvcache_blocks;
  if (blocks <= 0) {
    if (auto mem = device_memory(*backend_)) {
      const double budget = static_cast<double>(mem->total_bytes) * config_.gpu_memory_utilization -
                            static_cast<double>(mem->total_bytes - mem->free_bytes);
      blocks = budget > 0 ? static_cast<long long>(budget / static_cast<double>(block_bytes)) : 0;
      if (blocks <= 0)
        throw InvalidInput("no GPU memory left for the KV cache at gpu_memory_utilization " +
                           std::to_string(config_.gpu_memory_utilization) + " (weights and buffers use " +
                           std::to_string((mem->total_bytes - mem->free_bytes) / (1 << 20)) + " MiB)");
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
  for (int l = 0; l < model_config_.num_hidden_layers; ++l) {
    KvCacheLayer layer;
    for (Tensor* t : {&layer.k, &layer.v}) {
      Tensor probe(nullptr, backend_->compute_dtype(), {nb, bs, nkv, d});
      kv_storage_.push_back(backend_->allocate(probe.bytes()));
      *t = kv_storage_.back().view(backend_->compute_dtype(), {nb, bs, nkv, d});
    }
    kv_cache_.push_back(layer);
  }
  kv_cache_bytes_ = static_cast<size_t>(num_kvcache_blocks_) * block_bytes;
}

// One forward at the largest step shape, so that lazy initialisation (modules, GEMM heuristics) happens
// before the first request; the CPU needs none.
void ModelRunner::warmup() {
  if (!device_memory(*backend_)) return;
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
  meta_->upload(num_seqs);
  model_->forward(step_tensors(t, num_seqs, len, len, false), kv_cache_);
  backend_->synchronize();
}

void ModelRunner::pad_decode_rows(int from, int to) {
  const int blocks_per_seq = meta_->limits().max_blocks_per_seq;
  for (int s = from; s < to; ++s) {
    meta_->input_ids()[s] = 0;
    meta_->positions()[s] = 0;
    meta_->slot_mapping()[s] = -1;
    meta_->cu_seqlens_q()[s + 1] = s + 1;
    meta_->seq_lens_k()[s] = 1;
    meta_->logits_rows()[s] = s;
    int32_t* table = meta_->block_tables() + static_cast<size_t>(s) * blocks_per_seq;
    table[0] = 0;
    for (int b = 1; b < blocks_per_seq; ++b) table[b] = -1;
  }
}

StepTensors ModelRunner::step_tensors(int num_tokens, int num_seqs, int max_seqlen_q, int max_seqlen_k,
                                      bool decode_only) const {
  StepTensors step;
  step.num_tokens = num_tokens;
  step.input_ids = meta_->input_ids_tensor(num_tokens);
  step.positions = meta_->positions_tensor(num_tokens);
  step.slot_mapping = meta_->slot_mapping_tensor(num_tokens);
  step.attention = meta_->attention(num_seqs, max_seqlen_q, max_seqlen_k, config_.kvcache_block_size, decode_only);
  return step;
}

// Decode steps as CUDA graphs per batch bucket (nano-vLLM's 1, 2, 4, 8, 16, 32, ...). A graph replays the
// model and the lm_head over fixed metadata addresses (under tensor parallelism the lm_head of this rank's
// vocabulary chunk: whether the chunks are gathered or sampled where they are is decided per step); attention grids are sized for max_model_len keys and
// read the real lengths from device memory, so one graph serves every context length.
void ModelRunner::capture_graphs() {
  const int max_bs = std::min(config_.max_num_seqs, 512);
  std::vector<int> buckets;
  for (int b : {1, 2, 4, 8})
    if (b < max_bs) buckets.push_back(b);
  for (int b = 16; b < max_bs; b += 16) buckets.push_back(b);
  buckets.push_back(max_bs);
  meta_->begin_fill();
  meta_->cu_seqlens_q()[0] = 0;
  pad_decode_rows(0, max_bs);
  meta_->upload(max_bs);
  graphs_ = capture_decode_graphs(*backend_, buckets, [this](int b) {
    model_->forward(step_tensors(b, b, 1, config_.max_model_len, true), kv_cache_);
    sampling_logits(b);
  });
}

void ModelRunner::sampling_logits(int n) {
  const Tensor rows = meta_->logits_rows_tensor(n);
  if (comm_) return model_->shard_logits(rows);
  Tensor logits = logits_view(n);
  model_->logits(rows, logits);
}

StepOutput ModelRunner::run(const ScheduledBatch& batch) {
  const int bs = config_.kvcache_block_size;
  const int blocks_per_seq = meta_->limits().max_blocks_per_seq;
  const int num_seqs = static_cast<int>(batch.items.size());
  if (num_seqs == 0) return {};

  int t = 0, max_q = 0, max_k = 0, num_samples = 0, want_k = 0;
  bool want_sample_logprobs = false;
  bool needs_whole_rows = false;  // a sampling filter that looks at the whole vocabulary (top_k, top_p, min_p)
  bool raw_argmax_fallback = false;  // a row whose logit / T may overflow (see sample_on_shards)
  std::vector<int32_t> prompt_rows, prompt_targets;
  std::vector<std::pair<int, int>> prompt_where;  // (item, scored position)
  meta_->begin_fill();
  int32_t* cu = meta_->cu_seqlens_q();
  cu[0] = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const ScheduledSequence& item = batch.items[s];
    const Sequence& seq = *item.seq;
    const int start = seq.num_computed_tokens, end = start + item.num_new_tokens;
    for (int p = start; p < end; ++p, ++t) {
      meta_->input_ids()[t] = seq.token_ids[p];
      meta_->positions()[t] = p;
      meta_->slot_mapping()[t] = seq.block_table[p / bs] * bs + p % bs;
      // Logits at position p score token p + 1: a prompt token while p + 1 < num_prompt_tokens.
      if (seq.params.prompt_logprobs && p + 1 < seq.num_prompt_tokens) {
        prompt_rows.push_back(t);
        prompt_targets.push_back(seq.token_ids[p + 1]);
        prompt_where.emplace_back(s, p + 1);
        want_k = std::max(want_k, *seq.params.prompt_logprobs);
      }
    }
    cu[s + 1] = t;
    meta_->seq_lens_k()[s] = end;
    max_q = std::max(max_q, item.num_new_tokens);
    max_k = std::max(max_k, end);
    int32_t* table = meta_->block_tables() + static_cast<size_t>(s) * blocks_per_seq;
    const int nblocks = static_cast<int>(seq.block_table.size());
    for (int b = 0; b < blocks_per_seq; ++b) table[b] = b < nblocks ? seq.block_table[b] : -1;
    if (item.samples) {
      const int r = num_samples++;
      meta_->logits_rows()[r] = t - 1;
      const SamplingParams& sp = seq.params;
      meta_->temperature()[r] = sp.temperature;
      meta_->top_k()[r] = sp.top_k;
      meta_->top_p()[r] = sp.top_p;
      meta_->min_p()[r] = sp.min_p;
      meta_->seed()[r] = static_cast<int64_t>(sp.seed.value_or(0));
      meta_->sample_step()[r] = end;  // index the sampled token will have
      if (needs_whole_row(sp, model_config_.vocab_size)) needs_whole_rows = true;
      if (sp.temperature > 0.0f && sp.temperature < 1.0f) raw_argmax_fallback = true;
      if (sp.logprobs) {
        want_sample_logprobs = true;
        want_k = std::max(want_k, *sp.logprobs);
      }
    }
  }
  const bool decode_only = max_q == 1;
  const int bucket = decode_only && graphs_ ? graphs_->bucket_for(num_seqs) : 0;
  StepOutput out;
  if (bucket > 0) {
    // Every decode sequence samples, so logits rows are 0..num_seqs-1 already; pad up to the bucket.
    pad_decode_rows(num_seqs, bucket);
    meta_->upload(bucket);
    out.launched = std::chrono::steady_clock::now();
    graphs_->replay(bucket);
  } else {
    meta_->upload(num_seqs);
    out.launched = std::chrono::steady_clock::now();
    model_->forward(step_tensors(t, num_seqs, max_q, max_k, decode_only), kv_cache_);
  }

  // Every rank makes the same lm_head calls and collectives (the choice below is a function of the batch
  // alone); only the driver samples from whole rows and scores.
  if (num_samples > 0) {
    const Bans bans = early_stop_bans(batch);
    if (bucket == 0) sampling_logits(num_samples);  // a replayed graph has computed them already
    if (comm_ && !needs_whole_rows && !want_sample_logprobs && bans.rows.empty()) {
      out.sampled = sample_on_shards(num_samples, raw_argmax_fallback);
      out.sampled_on_shards = true;
      if (driver_) out.sampled_logprobs.resize(num_samples);
    } else {
      sample_whole_rows(batch, bans, num_samples, want_sample_logprobs, want_k, out);
    }
  }
  if (!prompt_rows.empty()) {
    std::vector<PositionLogprobs> entries;
    score_rows(prompt_rows, prompt_targets, want_k, entries);  // every rank: the lm_head gathers to rank 0
    for (size_t i = 0; driver_ && i < entries.size(); ++i) {
      const auto [item, position] = prompt_where[i];
      entries[i].resize(1 + static_cast<size_t>(*batch.items[item].seq->params.prompt_logprobs));
      out.prompt_logprobs.push_back({item, position, std::move(entries[i])});
    }
  }
  return out;
}

void ModelRunner::sample_whole_rows(const ScheduledBatch& batch, const Bans& bans, int n, bool want_logprobs,
                                    int want_k, StepOutput& out) {
  Tensor logits = logits_view(n);
  if (comm_) model_->gather_logits(n, logits);  // the chunks shard_logits() left on every rank
  if (driver_) {
    apply_bans(bans, logits);
    Tensor ids = sampled_buf_.view(DType::I32, {n});
    backend_->sample(logits, meta_->sampler_inputs(n), ids);
    out.sampled.resize(n);
    backend_->download(ids.data, out.sampled.data(), n * sizeof(int32_t));
    out.sampled_logprobs.resize(n);
  }
  if (want_logprobs) {
    if (!bans.rows.empty()) {  // logprobs come from the raw logits, which the bans changed: recompute all n rows
      std::vector<int32_t> rows(n);
      for (int r = 0; r < n; ++r) rows[r] = meta_->logits_rows()[r];
      score_rows(rows, out.sampled, want_k, out.sampled_logprobs);
    } else if (driver_) {
      logprobs_of(logits, out.sampled.data(), want_k, out.sampled_logprobs.data());
    }
    if (driver_) keep_requested_logprobs(batch, out.sampled_logprobs);
  }
}

std::vector<int32_t> ModelRunner::sample_on_shards(int n, bool raw_argmax_fallback) {
  const Tensor local = model_->last_shard_logits(n);
  const SamplerInputs in = meta_->sampler_inputs(n);
  // [parts, n]: sampled key, sampled token, then (with the fallback) greedy key, greedy token; tokens are I32
  // bits in the F32 rows.
  const int parts = raw_argmax_fallback ? 4 : 2;
  char* base = static_cast<char*>(picks_buf_.data());
  auto part = [&](int i, DType dtype) { return Tensor(base + static_cast<size_t>(i) * n * 4, dtype, {n}); };
  Tensor key = part(0, DType::F32), token = part(1, DType::I32);
  backend_->sample_shard(local, shard_.vocab_start, shard_.vocab_rows, in, key, token);
  if (raw_argmax_fallback) {
    SamplerInputs greedy = in;
    greedy.temperature = zero_temperature_buf_.view(DType::F32, {n});
    Tensor greedy_key = part(2, DType::F32), greedy_token = part(3, DType::I32);
    backend_->sample_shard(local, shard_.vocab_start, shard_.vocab_rows, greedy, greedy_key, greedy_token);
  }
  const int P = comm_->size();
  const int64_t width = static_cast<int64_t>(parts) * n;
  Tensor picks(base, DType::F32, {width}), gathered;
  if (driver_) gathered = Tensor(gathered_picks_buf_.data(), DType::F32, {P, width});
  comm_->gather_to_first(picks, gathered);
  if (!driver_) return {};
  float* all = static_cast<float*>(gathered_picks_host_.data());
  backend_->download(gathered.data, all, static_cast<size_t>(P) * width * sizeof(float));
  auto best = [&](int row, int key_part) {
    Backend::ShardPick pick;
    for (int p = 0; p < P; ++p) {
      const float* rank_picks = all + static_cast<size_t>(p) * width;
      int32_t t;
      std::memcpy(&t, &rank_picks[(key_part + 1) * n + row], sizeof t);
      Backend::merge_shard_pick(pick, rank_picks[key_part * n + row], t);
    }
    return pick;
  };
  std::vector<int32_t> sampled(n);
  for (int row = 0; row < n; ++row) {
    Backend::ShardPick pick = best(row, 0);
    if (pick.empty() && raw_argmax_fallback) pick = best(row, 2);
    sampled[row] = pick.sampled_token();
  }
  return sampled;
}

// Each sampled row computed want_k alternatives; a request gets only the `logprobs` it asked for (or none).
void ModelRunner::keep_requested_logprobs(const ScheduledBatch& batch, std::vector<PositionLogprobs>& sampled) const {
  int r = 0;
  for (const ScheduledSequence& item : batch.items) {
    if (!item.samples) continue;
    const auto& k = item.seq->params.logprobs;
    if (!k) sampled[r].clear();
    else sampled[r].resize(1 + static_cast<size_t>(*k));
    ++r;
  }
}

ModelRunner::Bans ModelRunner::early_stop_bans(const ScheduledBatch& batch) const {
  Bans bans;
  int r = 0;
  for (const ScheduledSequence& item : batch.items) {
    if (!item.samples) continue;
    const Sequence& seq = *item.seq;
    const SamplingParams& sp = seq.params;
    if (seq.num_completion_tokens() < sp.min_tokens) {
      auto ban = [&](int32_t token) {
        if (token < 0 || token >= model_config_.vocab_size) return;
        bans.rows.push_back(r);
        bans.tokens.push_back(token);
      };
      if (!sp.ignore_eos)
        for (int32_t eos : model_config_.eos_token_ids) ban(eos);
      for (int32_t stop : sp.stop_token_ids) ban(stop);
    }
    ++r;
  }
  return bans;
}

void ModelRunner::apply_bans(const Bans& bans, Tensor& logits) {
  const size_t capacity = static_cast<size_t>(max_logits_rows_) * kBansPerRow;
  for (size_t begin = 0; begin < bans.rows.size(); begin += capacity) {
    const int n = static_cast<int>(std::min(capacity, bans.rows.size() - begin));
    backend_->upload(bans.rows.data() + begin, ban_rows_buf_.data(), n * sizeof(int32_t));
    backend_->upload(bans.tokens.data() + begin, ban_tokens_buf_.data(), n * sizeof(int32_t));
    backend_->set_logits(logits, ban_rows_buf_.view(DType::I32, {n}), ban_tokens_buf_.view(DType::I32, {n}),
                         -std::numeric_limits<float>::infinity());
  }
}

void ModelRunner::score_rows(const std::vector<int32_t>& rows, const std::vector<int32_t>& targets, int k,
                             std::vector<PositionLogprobs>& out) {
  out.resize(rows.size());
  for (size_t begin = 0; begin < rows.size(); begin += max_logits_rows_) {
    const int n = static_cast<int>(std::min<size_t>(max_logits_rows_, rows.size() - begin));
    backend_->upload(rows.data() + begin, rows_buf_.data(), n * sizeof(int32_t));
    Tensor logits = logits_view(n);
    model_->logits(rows_buf_.view(DType::I32, {n}), logits);
    if (driver_) logprobs_of(logits, targets.data() + begin, k, out.data() + begin);
  }
}

void ModelRunner::logprobs_of(const Tensor& logits, const int32_t* targets, int k, PositionLogprobs* out) {
  const int n = static_cast<int>(logits.dim(0));
  std::vector<float> target_lp(n);
  std::vector<int32_t> top_ids(static_cast<size_t>(n) * std::max(k, 1));
  std::vector<float> top_lp(top_ids.size());
  backend_->upload(targets, targets_buf_.data(), n * sizeof(int32_t));
  Tensor t_lp = target_lp_buf_.view(DType::F32, {n});
  Tensor t_ids = top_ids_buf_.view(DType::I32, {n, k});
  Tensor t_top = top_lp_buf_.view(DType::F32, {n, k});
  backend_->logprobs(logits, targets_buf_.view(DType::I32, {n}), k, t_lp, t_ids, t_top);
  backend_->download(t_lp.data, target_lp.data(), n * sizeof(float));
  if (k > 0) {
    backend_->download(t_ids.data, top_ids.data(), static_cast<size_t>(n) * k * sizeof(int32_t));
    backend_->download(t_top.data, top_lp.data(), static_cast<size_t>(n) * k * sizeof(float));
  }
  for (int i = 0; i < n; ++i) {
    PositionLogprobs& e = out[i];
    e.clear();
    e.emplace_back(targets[i], target_lp[i]);
    for (int j = 0; j < k; ++j) e.emplace_back(top_ids[static_cast<size_t>(i) * k + j], top_lp[static_cast<size_t>(i) * k + j]);
  }
}

}  // namespace nanovllm
