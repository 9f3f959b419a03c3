#pragma once
// Decode steps recorded per batch bucket (Backend::capture_graph) and replayed instead of launching every op.
// Buckets are nano-vLLM's: 1, 2, 4, 8, then every 16 up to the largest batch.
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace nanovllm {

class DecodeGraphs {
 public:
  // The buckets for batches of up to max_batch sequences, ascending; the last is max_batch.
  static std::vector<int> buckets_up_to(int max_batch);

  // Records enqueue(bucket) once per bucket, largest first (the biggest working set is laid out first), each
  // after an eager run of it. backend.can_capture_graphs() must hold.
  DecodeGraphs(Backend& backend, std::vector<int> buckets, const std::function<void(int)>& enqueue);

  // Smallest captured bucket >= num_seqs, or 0 when none fits.
  int bucket_for(int num_seqs) const;
  void replay(int bucket);

 private:
  std::vector<int> buckets_;  // ascending
  std::vector<std::pair<int, std::unique_ptr<OpGraph>>> graphs_;
};

}  // namespace nanovllm
