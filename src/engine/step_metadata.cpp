#include "engine/step_metadata.h"

#include <array>
#include <cstring>

namespace nanovllm {

namespace {
size_t align_up(size_t x) { return (x + 63) & ~size_t{63}; }
}  // namespace

StepMetadata::StepMetadata(Backend& backend, const StepLimits& limits) : backend_(backend), limits_(limits) {
  size_t off = 0;
  auto take = [&](size_t bytes) {
    size_t at = off;
    off = align_up(off + bytes);
    return at;
  };
  const size_t S = limits.max_num_seqs, T = limits.max_num_tokens, R = limits.max_logits_rows;
  off_cu_seqlens_q_ = take(4 * (S + 1));
  off_seq_lens_k_ = take(4 * S);
  off_temperature_ = take(4 * R);
  off_top_k_ = take(4 * R);
  off_top_p_ = take(4 * R);
  off_min_p_ = take(4 * R);
  off_seed_ = take(8 * R);
  off_step_ = take(4 * R);
  off_logits_rows_ = take(4 * R);
  off_input_ids_ = take(4 * T);
  off_positions_ = take(4 * T);
  off_slot_mapping_ = take(4 * T);
  off_block_tables_ = take(4 * S * limits.max_blocks_per_seq);
  total_ = off;
  host_storage_ = backend.allocate_host(2 * total_);
  host_ = static_cast<char*>(host_storage_.data());
  std::memset(host_, 0, 2 * total_);
  for (auto& mark : uploaded_) mark = backend.create_mark();
  device_ = backend.allocate(total_);
  backend.upload(host_, device_.data(), total_);  // rows no step has written yet read as zeros
}

void StepMetadata::begin_fill() {
  area_ ^= 1;
  host_ = static_cast<char*>(host_storage_.data()) + static_cast<size_t>(area_) * total_;
  uploaded_[area_]->wait();
}

void StepMetadata::upload(int num_seqs, int num_tokens, const int32_t* device_input_ids) {
  const size_t s = num_seqs, t = num_tokens;
  const std::array<CopyRange, 13> ranges = {{
      {off_input_ids_, 4 * t},  // first: DeviceIdSource's range 0
      {off_positions_, 4 * t},
      {off_slot_mapping_, 4 * t},
      {off_cu_seqlens_q_, 4 * (s + 1)},
      {off_seq_lens_k_, 4 * s},
      {off_temperature_, 4 * s},
      {off_top_k_, 4 * s},
      {off_top_p_, 4 * s},
      {off_min_p_, 4 * s},
      {off_seed_, 8 * s},
      {off_step_, 4 * s},
      {off_logits_rows_, 4 * s},
      {off_block_tables_, 4 * s * limits_.max_blocks_per_seq},
  }};
  backend_.upload_ranges(host_, device_.data(), ranges, {0, device_input_ids});
  uploaded_[area_]->record();
}

AttentionBatch StepMetadata::attention(int num_seqs, int max_seqlen_q, int max_seqlen_k, int block_size,
                                       bool decode_only, int num_decode_rows) const {
  AttentionBatch a;
  a.cu_seqlens_q = device_i32(off_cu_seqlens_q_, num_seqs + 1);
  a.seq_lens_k = device_i32(off_seq_lens_k_, num_seqs);
  a.block_tables = Tensor(static_cast<char*>(device_.data()) + off_block_tables_, DType::I32,
                          {num_seqs, limits_.max_blocks_per_seq});
  a.num_seqs = num_seqs;
  a.max_seqlen_q = max_seqlen_q;
  a.max_seqlen_k = max_seqlen_k;
  a.max_blocks_per_seq = limits_.max_blocks_per_seq;
  a.block_size = block_size;
  a.decode_only = decode_only;
  a.num_decode_rows = num_decode_rows;
  return a;
}

SamplerInputs StepMetadata::sampler_inputs(int rows) const {
  SamplerInputs s;
  s.temperature = device_at(off_temperature_, DType::F32, rows);
  s.top_k = device_at(off_top_k_, DType::I32, rows);
  s.top_p = device_at(off_top_p_, DType::F32, rows);
  s.min_p = device_at(off_min_p_, DType::F32, rows);
  s.seed = device_at(off_seed_, DType::I64, rows);
  s.step = device_at(off_step_, DType::I32, rows);
  const auto* temperature = reinterpret_cast<const float*>(host_ + off_temperature_);
  const auto* top_k = reinterpret_cast<const int32_t*>(host_ + off_top_k_);
  const auto* top_p = reinterpret_cast<const float*>(host_ + off_top_p_);
  s.any_top_k_or_top_p = false;
  for (int r = 0; r < rows && !s.any_top_k_or_top_p; ++r)
    s.any_top_k_or_top_p = uses_top_k_or_top_p(temperature[r], top_k[r], top_p[r]);
  return s;
}

}  // namespace nanovllm
