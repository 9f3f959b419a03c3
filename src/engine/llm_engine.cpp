#include "engine/llm_engine.h"

#include <algorithm>
#include <filesystem>

#include "model/weight_source.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace nanovllm {

namespace {
// A well-mixed 64-bit value per request for requests without a seed (SplitMix64 finaliser).
uint64_t mix_seed(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The longest stop string's length minus one: the tail of the text that a stop string could still claim.
size_t stop_holdback(const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const std::string& stop : stops) longest = std::max(longest, stop.size());
  return longest == 0 ? 0 : longest - 1;
}
}  // namespace

struct LLMEngine::Request {
  int64_t id = 0;
  SamplingParams params;
  std::vector<int32_t> prompt_token_ids;  // handed out with the first delta
  std::unique_ptr<StreamingDetokenizer> detokenizer;
  std::string text;  // detokenized so far (stop strings cut)
  bool stopped_by_string = false;
  size_t stop_holdback = 0;
  // Not yet handed out in a delta:
  std::optional<std::vector<PositionLogprobs>> logprobs;         // of tokens since the last delta
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs;  // all of them, until handed out once
  size_t tokens_sent = 0, text_sent = 0;
  bool first_delta_sent = false;
  RequestMetrics metrics;
};

LLMEngine::LLMEngine(EngineConfig config) : config_(std::move(config)) {
  const auto start = std::chrono::steady_clock::now();
  config_.validate();
  const std::filesystem::path dir(config_.model);
  if (config_.load_dummy_weights && std::filesystem::is_regular_file(dir)) {
    model_config_ = ModelConfig::from_json(read_json_file(dir), nullptr);
  } else {
    model_config_ = ModelConfig::from_dir(dir);
  }
  // As nano-vLLM: the default length shrinks to what the model was trained for; a length asked for above it
  // is refused (positions past it were never trained, and their tables would be allocated for nothing).
  if (config_.max_model_len > model_config_.max_position_embeddings) {
    if (config_.max_model_len != EngineConfig{}.max_model_len)
      throw InvalidInput("max_model_len " + std::to_string(config_.max_model_len) +
                         " exceeds the model's max_position_embeddings (" +
                         std::to_string(model_config_.max_position_embeddings) + ")");
    config_.max_model_len = model_config_.max_position_embeddings;
  }
  if (std::filesystem::is_directory(dir) && std::filesystem::exists(dir / "tokenizer.json"))
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_model_dir(dir));

  const bool quantize_fp8 =
      apply_quantization_setting(config_.quantization, config_.load_dummy_weights, model_config_.quantization);
  const std::unique_ptr<WeightSource> weights =
      open_weights(dir, model_config_, config_.load_dummy_weights, config_.seed, quantize_fp8);
  executor_ = std::make_unique<ModelExecutor>(config_, model_config_, *weights);
  scheduler_ = std::make_unique<Scheduler>(config_, executor_->num_kvcache_blocks(), model_config_.eos_token_ids);
  startup_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

LLMEngine::~LLMEngine() = default;

std::string LLMEngine::backend_name() const {
  const std::string name = executor_->backend().name();
  const int tp = executor_->tensor_parallel_size();
  return tp == 1 ? name
                 : name + " x" + std::to_string(tp) + " (tensor parallel over " + executor_->communicator() + ")";
}

int64_t LLMEngine::add_request(const Prompt& prompt, SamplingParams params) {
  params.validate();
  std::vector<int32_t> ids = prompt.token_ids;
  if (ids.empty()) {
    if (prompt.text.empty()) throw InvalidInput("prompt is empty");
    if (!tokenizer_)
      throw InvalidInput(
          "text prompt needs a tokenizer, but the model folder has no tokenizer.json; "
          "pass prompt_token_ids instead");
    ids = tokenizer_->encode(prompt.text);
    if (ids.empty()) throw InvalidInput("prompt is empty after tokenization");
  }
  const int vocab = model_config_.vocab_size;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw InvalidInput("prompt token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                         " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (static_cast<int>(ids.size()) >= config_.max_model_len)
    throw InvalidInput("prompt has " + std::to_string(ids.size()) + " tokens; max_model_len " +
                       std::to_string(config_.max_model_len) + " leaves no room for output");
  for (int32_t id : params.stop_token_ids)
    if (id < 0 || id >= vocab)
      throw InvalidInput("stop_token_ids: " + std::to_string(id) + " is outside the vocabulary");
  if (!params.stop.empty() && !tokenizer_)
    throw InvalidInput("stop strings need a tokenizer, but the model folder has no tokenizer.json");
  if (!params.seed) params.seed = mix_seed(config_.seed * 0x100000001B3ull + static_cast<uint64_t>(next_request_id_));

  const int64_t id = next_request_id_++;
  auto req = std::make_unique<Request>();
  req->id = id;
  req->params = params;
  req->prompt_token_ids = ids;
  req->stop_holdback = stop_holdback(params.stop);
  req->metrics.arrival_time = EngineClock::now();
  if (params.logprobs) req->logprobs.emplace();
  if (params.prompt_logprobs) req->prompt_logprobs.emplace(ids.size());
  if (tokenizer_)
    req->detokenizer = std::make_unique<StreamingDetokenizer>(*tokenizer_, ids, params.skip_special_tokens);
  scheduler_->add(std::make_unique<Sequence>(id, std::move(ids), params));  // may throw: nothing kept then
  requests_.emplace(id, std::move(req));
  return id;
}

void LLMEngine::abort(int64_t request_id) {
  if (requests_.count(request_id)) scheduler_->abort(request_id);
}

// Nothing left to run and no output still owed (an abort finishes a request without a step).
bool LLMEngine::is_finished() const { return scheduler_->is_finished() && !scheduler_->has_untaken_finished(); }

std::vector<RequestOutput> LLMEngine::step() {
  std::vector<RequestOutput> finished;
  for (RequestDelta& delta : step_deltas()) {
    auto it = collected_.try_emplace(delta.request_id).first;
    it->second.append(std::move(delta));
    if (!it->second.finished) continue;
    finished.push_back(std::move(it->second));
    collected_.erase(it);
  }
  return finished;
}

std::vector<RequestDelta> LLMEngine::step_deltas() {
  const auto start = EngineClock::now();
  ScheduledBatch batch = scheduler_->schedule();
  auto ran = start;  // when the model's run returned
  if (!batch.empty()) {
    note_scheduled(batch, start);
    StepOutput out = executor_->run(batch);
    ran = EngineClock::now();
    record_logprobs(batch, out);
    scheduler_->postprocess(batch, out.sampled);
    detokenize(batch, out.sampled);
    last_step_.host_before_launch = std::chrono::duration<double>(out.launched - start).count();
    last_step_.sampled_on_shards = out.sampled_on_shards;
    last_step_.launched_early = out.launched_early;
    last_step_.is_prefill = batch.has_prefill();
    last_step_.num_tokens = batch.has_prefill() ? batch.num_tokens : static_cast<int>(batch.items.size());
    last_step_.num_decode_rows = batch.num_decode_rows;
  } else {
    last_step_ = StepStats{};
  }
  const auto end = EngineClock::now();
  std::vector<RequestDelta> deltas;
  for (const ScheduledSequence& item : batch.items)  // a sequence is in a batch once
    if (item.samples && !item.seq->is_finished())
      deltas.push_back(take_delta(*requests_.at(item.seq->seq_id), *item.seq, false, end));
  for (Sequence* seq : scheduler_->take_finished()) {
    auto it = requests_.find(seq->seq_id);
    deltas.push_back(take_delta(*it->second, *seq, true, end));
    requests_.erase(it);
    scheduler_->release(seq->seq_id);
  }
  const auto done = EngineClock::now();
  last_step_.seconds = std::chrono::duration<double>(done - start).count();
  if (!batch.empty()) last_step_.host_after_run = std::chrono::duration<double>(done - ran).count();
  return deltas;
}

void LLMEngine::note_scheduled(const ScheduledBatch& batch, EngineClock::time_point when) {
  for (const ScheduledSequence& item : batch.items) {
    RequestMetrics& m = requests_.at(item.seq->seq_id)->metrics;
    if (m.first_scheduled_time) continue;
    m.first_scheduled_time = when;
    m.num_cached_prompt_tokens = item.seq->num_cached_tokens;
  }
}

RequestDelta LLMEngine::take_delta(Request& req, const Sequence& seq, bool finished, EngineClock::time_point when) {
  RequestDelta d;
  d.request_id = req.id;
  d.time = when;
  if (!req.first_delta_sent) d.prompt_token_ids = req.prompt_token_ids;
  req.first_delta_sent = true;

  const auto completion = seq.completion_token_ids();
  d.token_ids.assign(completion.begin() + static_cast<std::ptrdiff_t>(req.tokens_sent), completion.end());
  req.tokens_sent = completion.size();
  if (!d.token_ids.empty()) {
    if (!req.metrics.first_token_time) req.metrics.first_token_time = when;
    req.metrics.last_token_time = when;
  }
  if (req.logprobs) {
    d.logprobs = std::move(req.logprobs);
    req.logprobs.emplace();
  }
  // The prompt's logprobs are all there once the first token was sampled.
  if (req.prompt_logprobs && (finished || !completion.empty())) {
    d.prompt_logprobs = std::move(req.prompt_logprobs);
    req.prompt_logprobs.reset();
  }

  if (finished && req.detokenizer && !req.stopped_by_string) req.text += req.detokenizer->flush();
  size_t stable = req.text.size();
  if (!finished) {
    // Hold back what a stop string could still claim, and never split a UTF-8 character doing so.
    stable = std::max(req.text_sent, stable - std::min(stable, req.stop_holdback));
    while (stable > req.text_sent && stable < req.text.size() && utf8::is_continuation(req.text[stable])) --stable;
  }
  d.text = req.text.substr(req.text_sent, stable - req.text_sent);
  req.text_sent = stable;

  if (finished) {
    d.finished = true;
    d.finish_reason = to_string(seq.finish_reason);
    req.metrics.finished_time = when;
  }
  d.metrics = req.metrics;
  return d;
}

EngineStats LLMEngine::stats() const {
  const BlockManager& blocks = scheduler_->block_manager();
  EngineStats s;
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting();
  s.num_kv_blocks = blocks.num_blocks();
  s.num_free_kv_blocks = blocks.num_free_blocks();
  s.num_preemptions = scheduler_->num_preemptions();
  s.prefix_cache_queried_tokens = blocks.num_prefix_queried_tokens();
  s.prefix_cache_hit_tokens = blocks.num_prefix_hit_tokens();
  return s;
}

void LLMEngine::record_logprobs(const ScheduledBatch& batch, const StepOutput& out) {
  for (const auto& p : out.prompt_logprobs) {
    Request& req = *requests_.at(batch.items[p.item].seq->seq_id);
    if (req.prompt_logprobs) (*req.prompt_logprobs)[p.position] = p.entry;
  }
  size_t r = 0;
  for (const ScheduledSequence& item : batch.items) {
    if (!item.samples) continue;
    Request& req = *requests_.at(item.seq->seq_id);
    if (req.logprobs) req.logprobs->push_back(out.sampled_logprobs[r]);
    ++r;
  }
}

void LLMEngine::detokenize(const ScheduledBatch& batch, const std::vector<int32_t>& sampled) {
  size_t r = 0;
  for (const ScheduledSequence& item : batch.items) {
    if (!item.samples) continue;
    Request& req = *requests_.at(item.seq->seq_id);
    const int32_t token = sampled[r++];
    if (!req.detokenizer || req.stopped_by_string) continue;
    // The model's vocabulary may be padded past the tokenizer's (Qwen3: 151936 vs 151669); such ids have no
    // text, as in HF's decode.
    if (token >= tokenizer_->vocab_size()) continue;
    const size_t before = req.text.size();
    req.text += req.detokenizer->push(token);
    const int completion = item.seq->num_completion_tokens();
    if (req.params.stop.empty() || completion <= req.params.min_tokens) continue;
    if (auto hit = find_stop_string(req.text, before, req.params.stop)) {
      req.text.resize(hit->cut_at);
      req.stopped_by_string = true;
      // Also when the token finished the sequence already (e.g. at max_tokens): the stop string is the reason.
      scheduler_->finish(item.seq->seq_id, FinishReason::Stop);
    }
  }
}

std::string LLMEngine::apply_chat_template(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                           bool add_generation_prompt, const nlohmann::ordered_json& extra) const {
  if (!tokenizer_ || !tokenizer_->chat_template())
    throw InvalidInput("\"messages\" need a chat template, but the model folder's tokenizer_config.json has none");
  nlohmann::ordered_json vars = extra.is_object() ? extra : nlohmann::ordered_json::object();
  for (auto [name, token] :
       {std::pair{"bos_token", tokenizer_->bos_token()}, std::pair{"eos_token", tokenizer_->eos_token()},
        std::pair{"pad_token", tokenizer_->pad_token()}})
    if (token && !vars.contains(name)) vars[name] = *token;
  return ChatTemplate(*tokenizer_->chat_template()).render(messages, tools, add_generation_prompt, vars);
}

StepProgress step_progress(const StepStats& stats, const std::vector<RequestOutput>& finished) {
  StepProgress step{static_cast<int>(finished.size()), 0, stats.is_prefill, stats.num_tokens, stats.seconds};
  for (const RequestOutput& out : finished) step.finished_output_tokens += static_cast<int64_t>(out.token_ids.size());
  return step;
}

}  // namespace nanovllm
