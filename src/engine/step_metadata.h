#pragma once
// One step's flat metadata in a fixed layout: filled on the host (pinned memory for CUDA), copied to the
// device in one asynchronous transfer, and viewed there as the tensors the model and sampler read. The
// layout is sized for the largest step, so addresses never change (CUDA graphs replay them).
// The host arrays alternate between two areas, so a step can be filled while the previous step's upload is still
// queued behind the device's work; begin_fill() switches areas and waits only for the upload of two fills ago.
#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace nanovllm {

struct StepLimits {
  int max_num_tokens = 0;
  int max_num_seqs = 0;
  int max_blocks_per_seq = 0;
  int max_logits_rows = 0;
};

class StepMetadata {
 public:
  StepMetadata(Backend& backend, const StepLimits& limits);

  // Switches to the other host area, waiting until its last upload() has been read.
  void begin_fill();

  // Host-side arrays the runner fills; their capacities are the limits.
  int32_t* input_ids() { return host_i32(off_input_ids_); }
  int32_t* positions() { return host_i32(off_positions_); }
  int32_t* slot_mapping() { return host_i32(off_slot_mapping_); }
  int32_t* logits_rows() { return host_i32(off_logits_rows_); }
  int32_t* cu_seqlens_q() { return host_i32(off_cu_seqlens_q_); }
  int32_t* seq_lens_k() { return host_i32(off_seq_lens_k_); }
  int32_t* block_tables() { return host_i32(off_block_tables_); }
  float* temperature() { return reinterpret_cast<float*>(host_ + off_temperature_); }
  int32_t* top_k() { return host_i32(off_top_k_); }
  float* top_p() { return reinterpret_cast<float*>(host_ + off_top_p_); }
  float* min_p() { return reinterpret_cast<float*>(host_ + off_min_p_); }
  int64_t* seed() { return reinterpret_cast<int64_t*>(host_ + off_seed_); }
  int32_t* sample_step() { return host_i32(off_step_); }

  // Enqueues the copy to the device of what a step of num_seqs sequences (sampling rows included) and num_tokens
  // token rows reads, in one operation; the host does not wait for it (a synchronous copy cost each decode step
  // 36-65 us on an H200 host). device_input_ids: input ids written as -1 - r on the host take row r of it.
  void upload(int num_seqs, int num_tokens, const int32_t* device_input_ids = nullptr);

  // Device views for a step of this size.
  Tensor input_ids_tensor(int n) const { return device_i32(off_input_ids_, n); }
  Tensor positions_tensor(int n) const { return device_i32(off_positions_, n); }
  Tensor slot_mapping_tensor(int n) const { return device_i32(off_slot_mapping_, n); }
  Tensor logits_rows_tensor(int n) const { return device_i32(off_logits_rows_, n); }
  AttentionBatch attention(int num_seqs, int max_seqlen_q, int max_seqlen_k, int block_size, bool decode_only,
                           int num_decode_rows) const;
  // Also says whether any of the rows, as the host area being filled holds them, uses top_k or top_p.
  SamplerInputs sampler_inputs(int rows) const;

  const StepLimits& limits() const { return limits_; }

 private:
  int32_t* host_i32(size_t off) { return reinterpret_cast<int32_t*>(host_ + off); }
  Tensor device_i32(size_t off, int n) const {
    return Tensor(device_.data() ? static_cast<char*>(device_.data()) + off : nullptr, DType::I32, {n});
  }
  Tensor device_at(size_t off, DType t, int n) const {
    return Tensor(static_cast<char*>(device_.data()) + off, t, {n});
  }

  Backend& backend_;
  StepLimits limits_;
  size_t off_cu_seqlens_q_, off_seq_lens_k_, off_input_ids_, off_positions_, off_slot_mapping_, off_logits_rows_;
  size_t off_temperature_, off_top_k_, off_top_p_, off_min_p_, off_seed_, off_step_, off_block_tables_, total_;
  Buffer host_storage_;   // two areas of total_ bytes
  char* host_ = nullptr;  // the area being filled
  int area_ = 0;
  std::unique_ptr<QueueMark> uploaded_[2];  // recorded after each area's last upload
  Buffer device_;
};

}  // namespace nanovllm
