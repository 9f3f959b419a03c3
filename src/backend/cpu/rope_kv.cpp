// The attention prologue of one step, fused as on the GPU: split qkv into q, k, v; per-head RMSNorm of q and
// k (Qwen3's q_norm / k_norm; skipped when those weights are empty, as in Qwen2); rotary embedding with NeoX
// halves; q to q_out, k and v into the paged cache at slot_mapping[t] (-1 = no cache write for that token),
// as F32 or as FP8 codes of value / scale.
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/checks.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/rms_row.h"
#include "common/fp8.h"

namespace nanovllm {

namespace {

// Normalises (optionally) and rotates one head of d values from src into dst (which may not alias src's
// other heads; dst == src is fine). cos = rope row[:d/2], sin = rope row[d/2:]:
//   dst[i]       = x[i] cos[i] - x[i + d/2] sin[i]
//   dst[i + d/2] = x[i + d/2] cos[i] + x[i] sin[i]
void norm_rope_head(const float* src, const float* norm_weight, float eps, const float* rope_row, int64_t d,
                    float* dst) {
  if (norm_weight != nullptr) {
    cpu::rms_norm_row(src, norm_weight, d, eps, dst);
  } else if (dst != src) {
    std::memcpy(dst, src, static_cast<size_t>(d) * sizeof(float));
  }
  const int64_t half = d / 2;
  const float* cos = rope_row;
  const float* sin = rope_row + half;
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = dst[i], x2 = dst[i + half];
    dst[i] = x1 * cos[i] - x2 * sin[i];
    dst[i + half] = x2 * cos[i] + x1 * sin[i];
  }
}

// FP8 cache rows: code = fp8(value / scale), the rounding the GPU's cvt.satfinite does.
void quantize_fp8(const float* values, float scale, int64_t n, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) codes[i] = float_to_fp8_e4m3(values[i] / scale);
}

const float* optional_norm(const Tensor& weight, int64_t head_dim, const char* name) {
  if (weight.empty()) return nullptr;
  cpu::require_dtype(weight, DType::F32, "qk_norm_rope_cache", name);
  cpu::require_vector(weight, head_dim, "qk_norm_rope_cache", name);
  return weight.as<const float>();
}

}  // namespace

void CpuBackend::qk_norm_rope_cache(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                                    const Tensor& positions, const Tensor& rope, const Tensor& slot_mapping,
                                    int num_heads, int num_kv_heads, int head_dim, KvCacheLayer& cache, Tensor& q_out) {
  const char* op = "qk_norm_rope_cache";
  const int64_t nh = num_heads, nkv = num_kv_heads, d = head_dim;
  cpu::require(nh > 0 && nkv > 0 && d > 0 && d % 2 == 0, op,
               "needs positive head counts and an even head_dim, got " + std::to_string(nh) + ", " +
                   std::to_string(nkv) + ", " + std::to_string(d));
  cpu::require_dtype(qkv, DType::F32, op, "qkv");
  cpu::require_dtype(positions, DType::I32, op, "positions");
  cpu::require_dtype(rope, DType::F32, op, "rope");
  cpu::require_dtype(slot_mapping, DType::I32, op, "slot_mapping");
  cpu::require_kv_cache(cache, op);
  cpu::require_dtype(q_out, DType::F32, op, "q_out");
  const int64_t tokens = qkv.dim(0);
  cpu::require_matrix(qkv, tokens, (nh + 2 * nkv) * d, op, "qkv");
  cpu::require_matrix(q_out, tokens, nh * d, op, "q_out");
  cpu::require_vector(positions, tokens, op, "positions");
  cpu::require_vector(slot_mapping, tokens, op, "slot_mapping");
  cpu::require(rope.ndim == 2 && rope.dim(1) == d, op,
               "rope has shape " + rope.shape_string() + ", expected [max_pos, " + std::to_string(d) + "]");
  cpu::require(cache.k.numel() == cache.v.numel() && cache.k.numel() % (nkv * d) == 0, op,
               "cache.k " + cache.k.shape_string() + " and cache.v " + cache.v.shape_string() +
                   " must be equal [num_blocks, block_size, " + std::to_string(nkv) + ", " + std::to_string(d) + "]");
  const float* qn = optional_norm(q_norm, d, "q_norm");
  const float* kn = optional_norm(k_norm, d, "k_norm");

  const int64_t max_pos = rope.dim(0);
  const int64_t num_slots = cache.k.numel() / (nkv * d);
  const int32_t* pos = positions.as<const int32_t>();
  const int32_t* slots = slot_mapping.as<const int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    cpu::require(pos[t] >= 0 && pos[t] < max_pos, op,
                 "position " + std::to_string(pos[t]) + " of token " + std::to_string(t) +
                     " is outside the rope "
                     "table [0, " +
                     std::to_string(max_pos) + ")");
    cpu::require(slots[t] >= -1 && slots[t] < num_slots, op,
                 "slot " + std::to_string(slots[t]) + " of token " + std::to_string(t) + " is outside [-1, " +
                     std::to_string(num_slots) + ")");
  }

  const float* in = qkv.as<const float>();
  const float* table = rope.as<const float>();
  float* q = q_out.as<float>();
  const int64_t row_width = (nh + 2 * nkv) * d;
  const bool fp8 = cache.is_fp8();
#pragma omp parallel num_threads(num_threads_) if (tokens * row_width > (1 << 14))
  {
    std::vector<float> k_row(fp8 ? static_cast<size_t>(d) : 0);  // FP8: K in fp32 before rounding
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      const float* row = in + t * row_width;
      const float* rope_row = table + static_cast<int64_t>(pos[t]) * d;
      for (int64_t h = 0; h < nh; ++h) norm_rope_head(row + h * d, qn, eps, rope_row, d, q + (t * nh + h) * d);
      if (slots[t] < 0) continue;
      const int64_t slot = slots[t];
      for (int64_t h = 0; h < nkv; ++h) {
        const int64_t at = (slot * nkv + h) * d;
        const float* v_row = row + (nh + nkv + h) * d;
        if (!fp8) {
          norm_rope_head(row + (nh + h) * d, kn, eps, rope_row, d, cache.k.as<float>() + at);
          std::memcpy(cache.v.as<float>() + at, v_row, static_cast<size_t>(d) * sizeof(float));
          continue;
        }
        norm_rope_head(row + (nh + h) * d, kn, eps, rope_row, d, k_row.data());
        quantize_fp8(k_row.data(), cache.k_scale, d, cache.k.as<uint8_t>() + at);
        quantize_fp8(v_row, cache.v_scale, d, cache.v.as<uint8_t>() + at);
      }
    }
  }
}

}  // namespace nanovllm
