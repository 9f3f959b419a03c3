#include "engine/decode_graphs.h"

#include <string>

#include "common/error.h"

namespace nanovllm {

std::vector<int> DecodeGraphs::buckets_up_to(int max_batch) {
  std::vector<int> buckets;
  for (int b : {1, 2, 4, 8})
    if (b < max_batch) buckets.push_back(b);
  for (int b = 16; b < max_batch; b += 16) buckets.push_back(b);
  buckets.push_back(max_batch);
  return buckets;
}

DecodeGraphs::DecodeGraphs(Backend& backend, std::vector<int> buckets, const std::function<void(int)>& enqueue)
    : buckets_(std::move(buckets)) {
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
    const int b = *it;
    enqueue(b);  // eager run first: lazy initialisation must not happen inside a capture
    backend.synchronize();
    graphs_.emplace_back(b, backend.capture_graph([&] { enqueue(b); }));
  }
}

int DecodeGraphs::bucket_for(int num_seqs) const {
  for (int b : buckets_)
    if (b >= num_seqs) return b;
  return 0;
}

void DecodeGraphs::replay(int bucket) {
  for (auto& [b, graph] : graphs_)
    if (b == bucket) return graph->replay();
  throw EngineError("no decode graph captured for batch " + std::to_string(bucket));
}

}  // namespace nanovllm
