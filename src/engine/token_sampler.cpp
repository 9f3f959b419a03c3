#include "engine/token_sampler.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace nanovllm {

namespace {
// Sampling with a filter that looks at the whole vocabulary: the filters Backend::sample_shard cannot apply.
bool needs_whole_row(const SamplingParams& sp, int vocab) {
  const bool filtered = (sp.top_k > 0 && sp.top_k < vocab) || sp.top_p < 1.0f || sp.min_p > 0.0f;
  return sp.temperature > 0.0f && filtered;
}
}  // namespace

TokenSampler::TokenSampler(Backend& backend, Qwen3Model& model, StepMetadata& meta, const ModelConfig& model_config,
                           const ShardLayout& shard, Communicator* comm, int max_logits_rows)
    : backend_(backend),
      model_(model),
      meta_(meta),
      comm_(comm),
      driver_(shard.rank == 0),
      vocab_size_(model_config.vocab_size),
      eos_token_ids_(model_config.eos_token_ids),
      vocab_start_(shard.vocab_start),
      vocab_rows_(shard.vocab_rows),
      max_logits_rows_(max_logits_rows) {
  const size_t R = max_logits_rows_, V = vocab_size_, K = SamplingParams::kMaxLogprobs;
  rows_buf_ = backend_.allocate(R * 4);  // every rank makes the lm_head calls
  if (driver_) {                         // only the driver samples and scores
    logits_buf_ = backend_.allocate(R * V * 4);
    sampled_buf_ = backend_.allocate(R * 4);
    targets_buf_ = backend_.allocate(R * 4);
    target_lp_buf_ = backend_.allocate(R * 4);
    top_ids_buf_ = backend_.allocate(R * K * 4);
    top_lp_buf_ = backend_.allocate(R * K * 4);
    ban_rows_buf_ = backend_.allocate(R * kBansPerRow * 4);
    ban_tokens_buf_ = backend_.allocate(R * kBansPerRow * 4);
  }
  if (comm_) {
    picks_buf_ = backend_.allocate(R * 4 * 4);
    if (driver_) {
      gathered_picks_buf_ = backend_.allocate(static_cast<size_t>(comm_->size()) * R * 4 * 4);
      gathered_picks_host_ = backend_.allocate_host(gathered_picks_buf_.bytes());
    }
    zero_temperature_buf_ = backend_.allocate(R * 4);
    const std::vector<float> zeros(R, 0.0f);
    backend_.upload(zeros.data(), zero_temperature_buf_.data(), R * 4);
  }
}

Tensor TokenSampler::logits_view(int n) const {
  return driver_ ? logits_buf_.view(DType::F32, {n, vocab_size_}) : Tensor{};
}

void TokenSampler::compute_logits(int n) {
  const Tensor rows = meta_.logits_rows_tensor(n);
  if (comm_) return model_.shard_logits(rows);
  Tensor logits = logits_view(n);
  model_.logits(rows, logits);
}

void TokenSampler::run(const ScheduledBatch& batch, bool logits_ready, StepOutput& out) {
  const Plan p = plan(batch);
  if (p.num_samples > 0) {
    if (!logits_ready) compute_logits(p.num_samples);
    if (comm_ && !p.needs_whole_rows && !p.want_sample_logprobs && p.bans.rows.empty()) {
      out.sampled = sample_on_shards(p.num_samples, p.raw_argmax_fallback);
      out.sampled_on_shards = true;
      if (driver_) out.sampled_logprobs.resize(p.num_samples);
    } else {
      sample_whole_rows(batch, p, out);
    }
  }
  if (!p.prompt_rows.empty()) score_prompts(batch, p, out);
}

bool TokenSampler::samples_plainly(const ScheduledBatch& batch) const {
  if (comm_ != nullptr || !driver_) return false;
  const Plan p = plan(batch);
  return p.num_samples == static_cast<int>(batch.items.size()) && p.bans.rows.empty() && !p.want_sample_logprobs &&
         p.prompt_rows.empty();
}

void TokenSampler::enqueue_plain(int n, bool logits_ready, int32_t* host_ids) {
  if (!logits_ready) compute_logits(n);
  Tensor ids = sampled_buf_.view(DType::I32, {n});
  backend_.sample(logits_view(n), meta_.sampler_inputs(n), ids);
  backend_.download_async(ids.data, host_ids, static_cast<size_t>(n) * sizeof(int32_t));
}

TokenSampler::Plan TokenSampler::plan(const ScheduledBatch& batch) const {
  Plan p;
  int first_row = 0;  // the item's first token row in the step
  for (int s = 0; s < static_cast<int>(batch.items.size()); ++s) {
    const ScheduledSequence& item = batch.items[s];
    const Sequence& seq = *item.seq;
    const SamplingParams& sp = seq.params;
    const int start = seq.num_computed_tokens, end = start + item.num_new_tokens;
    // Logits at position pos score token pos + 1: a prompt token while pos + 1 < num_prompt_tokens.
    for (int pos = start; sp.prompt_logprobs && pos < end && pos + 1 < seq.num_prompt_tokens; ++pos) {
      p.prompt_rows.push_back(first_row + pos - start);
      p.prompt_targets.push_back(seq.token_ids[pos + 1]);
      p.prompt_where.emplace_back(s, pos + 1);
      p.want_k = std::max(p.want_k, *sp.prompt_logprobs);
    }
    first_row += item.num_new_tokens;
    if (!item.samples) continue;
    add_bans(p.num_samples++, seq, p.bans);
    if (needs_whole_row(sp, vocab_size_)) p.needs_whole_rows = true;
    if (sp.temperature > 0.0f && sp.temperature < 1.0f) p.raw_argmax_fallback = true;
    if (sp.logprobs) {
      p.want_sample_logprobs = true;
      p.want_k = std::max(p.want_k, *sp.logprobs);
    }
  }
  return p;
}

void TokenSampler::add_bans(int row, const Sequence& seq, Bans& bans) const {
  const SamplingParams& sp = seq.params;
  if (seq.num_completion_tokens() >= sp.min_tokens) return;
  auto ban = [&](int32_t token) {
    if (token < 0 || token >= vocab_size_) return;
    bans.rows.push_back(row);
    bans.tokens.push_back(token);
  };
  if (!sp.ignore_eos)
    for (int32_t eos : eos_token_ids_) ban(eos);
  for (int32_t stop : sp.stop_token_ids) ban(stop);
}

void TokenSampler::apply_bans(const Bans& bans, Tensor& logits) {
  const size_t capacity = static_cast<size_t>(max_logits_rows_) * kBansPerRow;
  for (size_t begin = 0; begin < bans.rows.size(); begin += capacity) {
    const int n = static_cast<int>(std::min(capacity, bans.rows.size() - begin));
    backend_.upload(bans.rows.data() + begin, ban_rows_buf_.data(), n * sizeof(int32_t));
    backend_.upload(bans.tokens.data() + begin, ban_tokens_buf_.data(), n * sizeof(int32_t));
    backend_.set_logits(logits, ban_rows_buf_.view(DType::I32, {n}), ban_tokens_buf_.view(DType::I32, {n}),
                        -std::numeric_limits<float>::infinity());
  }
}

void TokenSampler::sample_whole_rows(const ScheduledBatch& batch, const Plan& plan, StepOutput& out) {
  const int n = plan.num_samples;
  Tensor logits = logits_view(n);
  if (comm_) model_.gather_logits(n, logits);  // the chunks shard_logits() left on every rank
  if (driver_) {
    apply_bans(plan.bans, logits);
    Tensor ids = sampled_buf_.view(DType::I32, {n});
    backend_.sample(logits, meta_.sampler_inputs(n), ids);
    out.sampled.resize(n);
    backend_.download(ids.data, out.sampled.data(), n * sizeof(int32_t));
    out.sampled_logprobs.resize(n);
  }
  if (!plan.want_sample_logprobs) return;
  if (!plan.bans.rows.empty()) {  // logprobs come from the raw logits, which the bans changed: recompute all n rows
    std::vector<int32_t> rows(n);
    for (int r = 0; r < n; ++r) rows[r] = meta_.logits_rows()[r];
    score_rows(rows, out.sampled, plan.want_k, out.sampled_logprobs);
  } else if (driver_) {
    logprobs_of(logits, out.sampled.data(), plan.want_k, out.sampled_logprobs.data());
  }
  if (driver_) keep_requested_logprobs(batch, out.sampled_logprobs);
}

std::vector<int32_t> TokenSampler::sample_on_shards(int n, bool raw_argmax_fallback) {
  const Tensor local = model_.last_shard_logits(n);
  const SamplerInputs in = meta_.sampler_inputs(n);
  // [parts, n]: sampled key, sampled token, then (with the fallback) greedy key, greedy token; tokens are I32
  // bits in the F32 rows.
  const int parts = raw_argmax_fallback ? 4 : 2;
  char* base = static_cast<char*>(picks_buf_.data());
  auto part = [&](int i, DType dtype) { return Tensor(base + static_cast<size_t>(i) * n * 4, dtype, {n}); };
  Tensor key = part(0, DType::F32), token = part(1, DType::I32);
  backend_.sample_shard(local, vocab_start_, vocab_rows_, in, key, token);
  if (raw_argmax_fallback) {
    SamplerInputs greedy = in;
    greedy.temperature = zero_temperature_buf_.view(DType::F32, {n});
    Tensor greedy_key = part(2, DType::F32), greedy_token = part(3, DType::I32);
    backend_.sample_shard(local, vocab_start_, vocab_rows_, greedy, greedy_key, greedy_token);
  }
  const int P = comm_->size();
  const int64_t width = static_cast<int64_t>(parts) * n;
  Tensor picks(base, DType::F32, {width}), gathered;
  if (driver_) gathered = Tensor(gathered_picks_buf_.data(), DType::F32, {P, width});
  comm_->gather_to_first(picks, gathered);
  if (!driver_) return {};
  float* all = static_cast<float*>(gathered_picks_host_.data());
  backend_.download(gathered.data, all, static_cast<size_t>(P) * width * sizeof(float));
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

void TokenSampler::keep_requested_logprobs(const ScheduledBatch& batch, std::vector<PositionLogprobs>& sampled) const {
  int r = 0;
  for (const ScheduledSequence& item : batch.items) {
    if (!item.samples) continue;
    const auto& k = item.seq->params.logprobs;
    if (!k) sampled[r].clear();
    else sampled[r].resize(1 + static_cast<size_t>(*k));
    ++r;
  }
}

void TokenSampler::score_prompts(const ScheduledBatch& batch, const Plan& plan, StepOutput& out) {
  std::vector<PositionLogprobs> entries;
  score_rows(plan.prompt_rows, plan.prompt_targets, plan.want_k, entries);  // every rank: the lm_head gathers to rank 0
  for (size_t i = 0; driver_ && i < entries.size(); ++i) {
    const auto [item, position] = plan.prompt_where[i];
    entries[i].resize(1 + static_cast<size_t>(*batch.items[item].seq->params.prompt_logprobs));
    out.prompt_logprobs.push_back({item, position, std::move(entries[i])});
  }
}

void TokenSampler::score_rows(const std::vector<int32_t>& rows, const std::vector<int32_t>& targets, int k,
                              std::vector<PositionLogprobs>& out) {
  out.resize(rows.size());
  for (size_t begin = 0; begin < rows.size(); begin += max_logits_rows_) {
    const int n = static_cast<int>(std::min<size_t>(max_logits_rows_, rows.size() - begin));
    backend_.upload(rows.data() + begin, rows_buf_.data(), n * sizeof(int32_t));
    Tensor logits = logits_view(n);
    model_.logits(rows_buf_.view(DType::I32, {n}), logits);
    if (driver_) logprobs_of(logits, targets.data() + begin, k, out.data() + begin);
  }
}

void TokenSampler::logprobs_of(const Tensor& logits, const int32_t* targets, int k, PositionLogprobs* out) {
  const int n = static_cast<int>(logits.dim(0));
  std::vector<float> target_lp(n);
  std::vector<int32_t> top_ids(static_cast<size_t>(n) * std::max(k, 1));
  std::vector<float> top_lp(top_ids.size());
  backend_.upload(targets, targets_buf_.data(), n * sizeof(int32_t));
  Tensor t_lp = target_lp_buf_.view(DType::F32, {n});
  Tensor t_ids = top_ids_buf_.view(DType::I32, {n, k});
  Tensor t_top = top_lp_buf_.view(DType::F32, {n, k});
  backend_.logprobs(logits, targets_buf_.view(DType::I32, {n}), k, t_lp, t_ids, t_top);
  backend_.download(t_lp.data, target_lp.data(), n * sizeof(float));
  if (k > 0) {
    backend_.download(t_ids.data, top_ids.data(), static_cast<size_t>(n) * k * sizeof(int32_t));
    backend_.download(t_top.data, top_lp.data(), static_cast<size_t>(n) * k * sizeof(float));
  }
  for (int i = 0; i < n; ++i) {
    PositionLogprobs& e = out[i];
    e.clear();
    e.emplace_back(targets[i], target_lp[i]);
    for (int j = 0; j < k; ++j)
      e.emplace_back(top_ids[static_cast<size_t>(i) * k + j], top_lp[static_cast<size_t>(i) * k + j]);
  }
}

}  // namespace nanovllm
