#pragma once
// One request as the scheduler sees it: its tokens (prompt + generated), where it stands, and its KV blocks.
#include <cstdint>
#include <span>
#include <vector>

#include "nanovllm/sampling_params.h"

namespace nanovllm {

enum class SequenceStatus { Waiting, Running, Finished };

// Stop = EOS, a stop token or a stop string; Length = max_tokens or max_model_len; Abort = cancelled.
enum class FinishReason { None, Stop, Length, Abort };

// "stop" | "length" | "abort" as vLLM names them; "" for None.
const char* to_string(FinishReason reason);

class Sequence {
 public:
  Sequence(int64_t id, std::vector<int32_t> prompt, SamplingParams sampling_params);

  int64_t seq_id;
  SequenceStatus status = SequenceStatus::Waiting;
  FinishReason finish_reason = FinishReason::None;
  std::vector<int32_t> token_ids;  // prompt, then generated tokens
  int num_prompt_tokens;
  SamplingParams params;
  int num_cached_tokens = 0;         // tokens whose KV came from the prefix cache at the last allocation
  int num_computed_tokens = 0;       // tokens whose KV is in the cache (chunked prefill progress)
  std::vector<int32_t> block_table;  // logical block i -> physical KV block

  int size() const { return static_cast<int>(token_ids.size()); }
  int num_completion_tokens() const { return size() - num_prompt_tokens; }
  std::span<const int32_t> prompt_token_ids() const;
  std::span<const int32_t> completion_token_ids() const;
  int32_t last_token() const { return token_ids.back(); }

  // Blocks needed to hold all current tokens.
  int num_blocks(int block_size) const { return (size() + block_size - 1) / block_size; }
  // Tokens of logical block i (the last block may be partial).
  std::span<const int32_t> block_tokens(int i, int block_size) const;

  void append_token(int32_t token_id) { token_ids.push_back(token_id); }
  bool is_finished() const { return status == SequenceStatus::Finished; }
};

}  // namespace nanovllm
