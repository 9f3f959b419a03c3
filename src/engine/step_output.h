#pragma once
// What one model step gives the engine: the sampled token of every sequence that finished its prompt chunk,
// and the logprobs requests asked for.
#include <chrono>
#include <cstdint>
#include <vector>

#include "nanovllm/outputs.h"

namespace nanovllm {

struct StepOutput {
  // One per scheduled item with samples == true, in item order.
  std::vector<int32_t> sampled;
  std::vector<PositionLogprobs> sampled_logprobs;  // empty entries where the request asked none
  // Logprobs of prompt tokens: `position` is the index of the scored prompt token (>= 1).
  struct PromptEntry {
    int item = 0;
    int position = 0;
    PositionLogprobs entry;
  };
  std::vector<PromptEntry> prompt_logprobs;
  // When the model's work was handed to the device (the bench's split of a step into host and device time).
  std::chrono::steady_clock::time_point launched;
  // Tensor parallelism: the rows were sampled on the vocabulary shards (only picks reached rank 0).
  bool sampled_on_shards = false;
  // Asynchronous scheduling: the step was launched during the previous one, before its batch was scheduled.
  bool launched_early = false;
};

}  // namespace nanovllm
