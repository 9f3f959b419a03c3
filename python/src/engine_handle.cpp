#include "engine_handle.h"

#include <unordered_map>

#include "common/error.h"
#include "engine/progress_bar.h"
#include "py_json.h"
#include "requests_in_flight.h"
#include "token_text.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm::python {

namespace py = pybind11;

EngineHandle::EngineHandle(EngineConfig config) {
  py::gil_scoped_release release;
  engine_ = std::make_unique<LLMEngine>(std::move(config));
}

EngineHandle::~EngineHandle() = default;

EngineCall EngineHandle::lock_engine() {
  EngineCall call(busy_, "this LLM is already running a call (it runs one at a time)");
  if (!engine_) throw std::runtime_error("this LLM is closed");
  return call;
}

std::unique_ptr<StreamRun> EngineHandle::stream(const std::vector<Prompt>& prompts,
                                                const std::vector<SamplingParams>& params) {
  EngineCall call = lock_engine();
  return std::make_unique<StreamRun>(*engine_, std::move(call), prompts, params);
}

std::vector<RequestOutput> EngineHandle::generate(const std::vector<Prompt>& prompts,
                                                  const std::vector<SamplingParams>& params, const py::object& on_step,
                                                  bool native_progress) {
  if (params.size() != prompts.size())
    throw InvalidInput("generate: " + std::to_string(prompts.size()) + " prompts but " + std::to_string(params.size()) +
                       " sampling params");
  const auto lock = lock_engine();
  LLMEngine& engine = *engine_;
  RequestsInFlight in_flight(engine);
  std::unordered_map<int64_t, size_t> index_of;
  {
    py::gil_scoped_release release;  // tokenizing long prompts takes a while
    for (size_t i = 0; i < prompts.size(); ++i) {
      try {
        const int64_t id = engine.add_request(prompts[i], params[i]);
        in_flight.started(id);
        index_of[id] = i;
      } catch (const InvalidInput& e) {
        throw InvalidInput("request " + std::to_string(i) + ": " + e.what());
      }
    }
  }

  std::vector<RequestOutput> outputs(prompts.size());
  const RunCounters before = engine.run_counters();  // the summary covers this call
  ProgressBar bar(static_cast<int>(prompts.size()), native_progress);
  while (!engine.is_finished()) {
    std::vector<RequestOutput> done;
    {
      py::gil_scoped_release release;
      done = engine.step();
    }
    const StepStats& s = engine.last_step();
    bar.update(step_progress(s, done));
    for (RequestOutput& out : done) {
      in_flight.finished(out.request_id);
      outputs[index_of.at(out.request_id)] = std::move(out);
    }
    if (!on_step.is_none()) on_step(done.size(), s.is_prefill, s.num_tokens, s.seconds);
    // Runs Python's signal handlers: Ctrl-C raises KeyboardInterrupt here, between two steps.
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  bar.finish(engine.run_counters().since(before));
  return outputs;
}

const Tokenizer& EngineHandle::tokenizer() {
  const Tokenizer* t = engine_->tokenizer();
  if (t == nullptr) throw InvalidInput("the model folder has no tokenizer.json");
  return *t;
}

bool EngineHandle::has_tokenizer() {
  const auto lock = lock_engine();
  return engine_->tokenizer() != nullptr;
}

std::vector<int32_t> EngineHandle::encode(const std::string& text) {
  const auto lock = lock_engine();
  const Tokenizer& t = tokenizer();
  py::gil_scoped_release release;
  return t.encode(text);
}

std::string EngineHandle::decode(const std::vector<int32_t>& token_ids, bool skip_special_tokens) {
  const auto lock = lock_engine();
  const Tokenizer& t = tokenizer();
  py::gil_scoped_release release;
  return t.decode(token_ids, skip_special_tokens);
}

std::string EngineHandle::apply_chat_template(py::handle messages, py::handle tools, bool add_generation_prompt,
                                              py::handle template_variables) {
  const auto lock = lock_engine();
  const nlohmann::ordered_json variables =
      template_variables.is_none() ? nlohmann::ordered_json::object() : to_json(template_variables);
  return engine_->apply_chat_template(to_json(messages), to_json(tools), add_generation_prompt, variables);
}

std::map<std::string, std::optional<std::string>> EngineHandle::special_tokens() {
  const auto lock = lock_engine();
  const Tokenizer& t = tokenizer();
  return {{"bos_token", t.bos_token()}, {"eos_token", t.eos_token()}, {"pad_token", t.pad_token()}};
}

std::optional<int32_t> EngineHandle::token_to_id(const std::string& token) {
  const auto lock = lock_engine();
  return tokenizer().token_to_id(token);
}

std::optional<std::string> EngineHandle::token_text(int32_t token) {
  const auto lock = lock_engine();
  return python::token_text(*engine_, token);
}

int32_t EngineHandle::vocab_size() {
  const auto lock = lock_engine();
  return tokenizer().vocab_size();
}

std::string EngineHandle::backend_name() {
  const auto lock = lock_engine();
  return engine_->backend_name();
}

void EngineHandle::close() {
  const EngineCall call(busy_, "this LLM cannot close while a call is running (or a stream is open)");
  py::gil_scoped_release release;
  engine_.reset();
}

}  // namespace nanovllm::python
