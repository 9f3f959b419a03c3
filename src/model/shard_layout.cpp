#include "model/shard_layout.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace nanovllm {

namespace {
void require_divides(int size, int64_t value, const char* what) {
  if (value % size != 0)
    throw InvalidInput("tensor_parallel_size " + std::to_string(size) + " does not divide the model's " + what + " (" +
                       std::to_string(value) + ")");
}
}  // namespace

ShardLayout ShardLayout::of(const ModelConfig& config, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw EngineError("ShardLayout: rank " + std::to_string(rank) + " is outside a group of " + std::to_string(size) +
                      " ranks");
  require_divides(size, config.num_attention_heads, "num_attention_heads");
  require_divides(size, config.intermediate_size, "intermediate_size");
  ShardLayout s;
  s.rank = rank;
  s.size = size;
  s.num_heads = config.num_attention_heads / size;
  const int nkv = config.num_key_value_heads;
  if (nkv >= size) {
    require_divides(size, nkv, "num_key_value_heads");
    s.num_kv_heads = nkv / size;
    s.kv_head_start = rank * s.num_kv_heads;
  } else {
    if (size % nkv != 0)
      throw InvalidInput("tensor_parallel_size " + std::to_string(size) + " is not a multiple of the model's " +
                         "num_key_value_heads (" + std::to_string(nkv) + "), so KV heads cannot be replicated evenly");
    // size / nkv ranks share each KV head; rank r's query heads all belong to KV head r / (size / nkv).
    s.num_kv_heads = 1;
    s.kv_head_start = rank / (size / nkv);
  }
  s.intermediate = config.intermediate_size / size;
  s.vocab_chunk = (static_cast<int64_t>(config.vocab_size) + size - 1) / size;
  s.vocab_start = std::min<int64_t>(rank * s.vocab_chunk, config.vocab_size);
  s.vocab_rows = std::min<int64_t>(s.vocab_chunk, config.vocab_size - s.vocab_start);
  return s;
}

}  // namespace nanovllm
