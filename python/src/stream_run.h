#pragma once
// One LLM.stream() call. Its requests are added up front; Python pulls, and each pull runs engine steps (the GIL
// released) until one adds something, returning what it added to each request with the request's index in the
// call. The engine stays claimed for the call until close(), which aborts whatever has not finished, so that a
// stream abandoned half-way (a `break`, an exception, Ctrl-C) leaves the LLM ready for the next call.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/llm_engine.h"
#include "engine_call.h"
#include "requests_in_flight.h"

namespace nanovllm::python {

class StreamRun {
 public:
  // Adds every request; a refused one throws InvalidInput naming its index, and none runs then.
  StreamRun(LLMEngine& engine, EngineCall call, const std::vector<Prompt>& prompts,
            const std::vector<SamplingParams>& params);

  // The next step's deltas as (prompt index, delta); empty once every request has finished (the call is then
  // closed). A pending signal (Ctrl-C) raises KeyboardInterrupt before a step starts.
  std::vector<std::pair<size_t, RequestDelta>> next();
  // A token's text for logprobs (see token_text.h), asked while the run holds the engine.
  std::optional<std::string> token_text(int32_t token);
  // Aborts the unfinished requests and releases the engine; a no-op the second time.
  void close();
  bool closed() const { return !call_.has_value(); }

 private:
  LLMEngine& engine_;
  std::optional<EngineCall> call_;
  std::unique_ptr<RequestsInFlight> in_flight_;  // declared after call_: aborts before the claim is released
  std::unordered_map<int64_t, size_t> index_of_;
};

}  // namespace nanovllm::python
