#include "nanovllm/llm.h"

#include <map>

#include "common/error.h"
#include "engine/llm_engine.h"
#include "engine/progress_bar.h"

namespace nanovllm {

LLM::LLM(EngineConfig config) : engine_(std::make_unique<LLMEngine>(std::move(config))) {}
LLM::~LLM() = default;

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts,
                                         const std::vector<SamplingParams>& params) {
  if (params.size() != prompts.size())
    throw InvalidInput("generate: " + std::to_string(prompts.size()) + " prompts but " + std::to_string(params.size()) +
                       " sampling params");
  std::vector<RequestOutput> outputs(prompts.size());
  std::map<int64_t, size_t> index_of;
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      index_of[engine_->add_request(prompts[i], params[i])] = i;
    } catch (const InvalidInput& e) {  // one bad request never takes down the others
      outputs[i].error = e.what();
      outputs[i].prompt_token_ids = prompts[i].token_ids;
    }
  }
  const RunCounters before = engine_->run_counters();  // the summary covers this call
  ProgressBar bar(static_cast<int>(index_of.size()), engine_->config().show_progress);
  while (!engine_->is_finished()) {
    std::vector<RequestDelta> deltas = engine_->step_deltas();
    const StepStats& s = engine_->last_step();
    StepProgress step{0, 0, s.is_prefill, s.num_tokens, s.seconds};
    for (RequestDelta& delta : deltas) {
      RequestOutput& out = outputs[index_of.at(delta.request_id)];
      out.append(std::move(delta));
      if (!out.finished) continue;
      ++step.finished_requests;
      step.finished_output_tokens += static_cast<int64_t>(out.token_ids.size());
    }
    bar.update(step);
  }
  bar.finish(engine_->run_counters().since(before));
  return outputs;
}

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts, const SamplingParams& params) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::string>& prompts, const SamplingParams& params) {
  std::vector<Prompt> p;
  p.reserve(prompts.size());
  for (const std::string& text : prompts) p.push_back(Prompt::from_text(text));
  return generate(p, params);
}

std::string LLM::apply_chat_template(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                     bool add_generation_prompt, const nlohmann::ordered_json& extra) const {
  return engine_->apply_chat_template(messages, tools, add_generation_prompt, extra);
}

EngineSummary LLM::summary() const {
  EngineSummary s;
  s.backend = engine_->backend_name();
  s.num_kvcache_blocks = engine_->num_kvcache_blocks();
  s.kv_cache_bytes = engine_->kv_cache_bytes();
  s.weight_bytes = engine_->weight_bytes();
  s.startup_seconds = engine_->startup_seconds();
  return s;
}

}  // namespace nanovllm
