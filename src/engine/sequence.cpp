#include "engine/sequence.h"

#include <algorithm>
#include <utility>

namespace nanovllm {

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Abort:
      return "abort";
    case FinishReason::None:
      break;
  }
  return "";
}

Sequence::Sequence(int64_t id, std::vector<int32_t> prompt, SamplingParams sampling_params)
    : seq_id(id),
      token_ids(std::move(prompt)),
      num_prompt_tokens(static_cast<int>(token_ids.size())),
      params(std::move(sampling_params)) {}

std::span<const int32_t> Sequence::prompt_token_ids() const {
  return std::span<const int32_t>(token_ids).first(num_prompt_tokens);
}

std::span<const int32_t> Sequence::completion_token_ids() const {
  return std::span<const int32_t>(token_ids).subspan(num_prompt_tokens);
}

std::span<const int32_t> Sequence::block_tokens(int i, int block_size) const {
  const size_t begin = std::min(token_ids.size(), static_cast<size_t>(i) * block_size);
  const size_t end = std::min(token_ids.size(), begin + block_size);
  return std::span<const int32_t>(token_ids).subspan(begin, end - begin);
}

}  // namespace nanovllm
