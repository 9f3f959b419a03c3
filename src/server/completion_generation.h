#pragma once
// POST /v1/completions in flight: one choice per prompt, text (with the prompt first when echo is set) and
// logprobs in the completions form.
#include <optional>
#include <vector>

#include "server/generation.h"
#include "server/logprobs_json.h"

namespace nanovllm::server {

class CompletionGeneration : public Generation {
 public:
  CompletionGeneration(GenerationContext context, bool stream, bool include_usage, bool echo,
                       std::optional<int> logprobs);

 private:
  void open_stream(std::string& events) override;
  void stream_delta(size_t index, const RequestDelta& delta, std::string& events) override;
  nlohmann::json whole_response() override;
  const char* stream_object() const override { return "text_completion"; }

  const bool echo_;
  const std::optional<int> logprobs_;
  std::vector<CompletionLogprobs> streamed_logprobs_;  // per choice: text offsets run on across chunks
  std::vector<bool> echoed_;                           // per choice: the prompt went out (in the first chunk)
};

}  // namespace nanovllm::server
