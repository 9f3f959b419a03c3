#pragma once
// The engine as the Python module holds it. generate() runs LLMEngine's step loop itself so that Python keeps
// control: the GIL is released while a step runs, and between steps a pending signal (Ctrl-C) or an exception
// from the progress callback stops the loop, aborts the requests still in flight and leaves the engine ready for
// the next call. close() frees the engine (weights, KV cache, rank threads) before the Python object goes.
//
// stream() returns the same loop turned inside out: a StreamRun that Python pulls a step at a time.
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "engine_call.h"
#include "stream_run.h"

namespace nanovllm {
class Tokenizer;
}

namespace nanovllm::python {

class EngineHandle {
 public:
  // Loads the model with the GIL released. Throws InvalidInput (ValueError) for a bad config or model folder.
  explicit EngineHandle(EngineConfig config);
  ~EngineHandle();
  EngineHandle(const EngineHandle&) = delete;
  EngineHandle& operator=(const EngineHandle&) = delete;

  // All prompts to completion, outputs in input order. `on_step` (a callable or None) is called after every
  // step with (requests finished in it, is_prefill, tokens, seconds); `native_progress` draws the engine's own
  // progress bar on stderr. A request the engine refuses raises ValueError naming its index; none runs then.
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params,
                                      const pybind11::object& on_step, bool native_progress);

  // Adds the requests and returns the run Python pulls deltas from; it holds the engine until it is closed.
  std::unique_ptr<StreamRun> stream(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params);

  bool has_tokenizer();
  std::vector<int32_t> encode(const std::string& text);
  std::string decode(const std::vector<int32_t>& token_ids, bool skip_special_tokens);
  std::string apply_chat_template(pybind11::handle messages, pybind11::handle tools, bool add_generation_prompt,
                                  pybind11::handle template_variables);
  // bos_token, eos_token, pad_token: their text, or nullopt where the tokenizer has none.
  std::map<std::string, std::optional<std::string>> special_tokens();
  std::optional<int32_t> token_to_id(const std::string& token);
  std::optional<std::string> token_text(int32_t token);  // for logprobs: see token_text.h
  int32_t vocab_size();
  std::string backend_name();

  // Frees the engine; every later call raises RuntimeError. Safe to call twice.
  void close();
  bool closed() const { return engine_ == nullptr; }

 private:
  // Exclusive access for one call; throws when the engine is closed or another call (another thread, a
  // progress callback calling back in, an open stream) is running.
  EngineCall lock_engine();
  const Tokenizer& tokenizer();  // throws InvalidInput without tokenizer.json

  std::unique_ptr<LLMEngine> engine_;
  std::atomic<bool> busy_{false};
};

}  // namespace nanovllm::python
