// q/k per-head RMSNorm + NeoX RoPE + K/V cache write, one pass over qkv. A group of d/8 lanes owns one
// (token, head): each lane holds eight consecutive values (one 16-byte load), the head's sum of squares is
// a shuffle reduction inside the group, and the rotation partner (x[i ± d/2]) is in the lane d/16 away, so
// it is one more shuffle. Every lane runs the shuffles (q, k and v groups share warps); only the stores
// depend on the head kind. Math in fp32, one rounding at the store (to bf16, or to FP8 after the scale).
#include "backend/cuda/bf16_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_vec.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/programmatic_launch.cuh"

namespace nanovllm::cuda {
namespace {

constexpr int kThreads = 256;

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads) qk_norm_rope_cache_kernel(const QkNormRopeCacheArgs a) {
  constexpr int kLanes = kHeadDim / 8;  // lanes per (token, head)
  constexpr int kHalfLanes = kLanes / 2;
  allow_next_grid();
  const int heads_total = a.num_heads + 2 * a.num_kv_heads;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (kThreads / kLanes) + threadIdx.x / kLanes;
  const bool valid = item < static_cast<int64_t>(a.num_tokens) * heads_total;
  const int lane = threadIdx.x % kLanes;
  const int col = lane * 8;
  const int t = valid ? static_cast<int>(item / heads_total) : 0;
  const int h = valid ? static_cast<int>(item % heads_total) : 0;
  const bool is_q = h < a.num_heads;
  const bool is_v = h >= a.num_heads + a.num_kv_heads;
  const bool first_half = lane < kHalfLanes;

  // Before the wait: the norm weights and rotation table (constant) and the step's positions and cache slots
  // (written by a copy before the step), so that after it the chain is the qkv load alone.
  const __nv_bfloat16* norm_weight = is_q ? a.q_norm : (is_v ? nullptr : a.k_norm);
  float w[8] = {}, cs[8] = {}, sn[8] = {};
  if (valid && norm_weight != nullptr) to_float8(load_bf16x8(norm_weight + col), w);
  if (valid && !is_v) {
    const int freq = first_half ? col : col - kHeadDim / 2;
    const float* rope_row = a.rope + static_cast<int64_t>(a.positions[t]) * kHeadDim;
    const float4 c0 = *reinterpret_cast<const float4*>(rope_row + freq);
    const float4 c1 = *reinterpret_cast<const float4*>(rope_row + freq + 4);
    const float4 s0 = *reinterpret_cast<const float4*>(rope_row + kHeadDim / 2 + freq);
    const float4 s1 = *reinterpret_cast<const float4*>(rope_row + kHeadDim / 2 + freq + 4);
    const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) cs[j] = c[j], sn[j] = s[j];
  }
  const int slot = valid && !is_q ? a.slot_mapping[t] : -1;
  wait_for_previous_grid();

  float x[8] = {};
  if (valid) to_float8(load_bf16x8(a.qkv + (static_cast<int64_t>(t) * heads_total + h) * kHeadDim + col), x);

  // Per-head RMSNorm (Qwen3's q_norm / k_norm).
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum_sq += x[j] * x[j];
#pragma unroll
  for (int offset = kHalfLanes; offset > 0; offset >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  if (valid && norm_weight != nullptr) {
    const float inv_rms = rsqrtf(sum_sq / kHeadDim + a.eps);
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = x[j] * inv_rms * w[j];
  }

  // NeoX rotation: out[i] = x[i] cos - x[i + d/2] sin (first half), x[i] cos + x[i - d/2] sin (second half).
  float partner[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) partner[j] = __shfl_xor_sync(0xffffffffu, x[j], kHalfLanes);
  if (valid && !is_v) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      x[j] = first_half ? x[j] * cs[j] - partner[j] * sn[j] : x[j] * cs[j] + partner[j] * sn[j];
  }
  if (!valid) return;

  const Bf16x8 result = from_float8(x);
  if (is_q) {
    store_bf16x8(a.q_out + (static_cast<int64_t>(t) * a.num_heads + h) * kHeadDim + col, result);
    return;
  }
  if (slot < 0) return;
  const int kv_head = is_v ? h - a.num_heads - a.num_kv_heads : h - a.num_heads;
  const int64_t at = (static_cast<int64_t>(slot) * a.num_kv_heads + kv_head) * kHeadDim + col;
  if (!a.fp8_cache) {
    store_bf16x8(static_cast<__nv_bfloat16*>(is_v ? a.v_cache : a.k_cache) + at, result);
    return;
  }
  // FP8: the fp32 value (not its bf16 rounding) over the layer's scale, one rounding to E4M3.
  const float scale = is_v ? a.v_scale : a.k_scale;
#pragma unroll
  for (int j = 0; j < 8; ++j) x[j] = __fdiv_rn(x[j], scale);
  *reinterpret_cast<uint2*>(static_cast<uint8_t*>(is_v ? a.v_cache : a.k_cache) + at) = fp8x8_from_float(x);
}

template <int kHeadDim>
void launch_for(const QkNormRopeCacheArgs& args, cudaStream_t stream) {
  constexpr int kItemsPerBlock = kThreads / (kHeadDim / 8);
  const int64_t items = static_cast<int64_t>(args.num_tokens) * (args.num_heads + 2 * args.num_kv_heads);
  const int64_t blocks = (items + kItemsPerBlock - 1) / kItemsPerBlock;
  launch_programmatic("qk_norm_rope_cache_kernel", qk_norm_rope_cache_kernel<kHeadDim>,
                      dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, args);
}

}  // namespace

void launch_qk_norm_rope_cache(const QkNormRopeCacheArgs& args, cudaStream_t stream) {
  if (args.num_tokens == 0) return;
  switch (args.head_dim) {
    case 64:
      return launch_for<64>(args, stream);
    case 128:
      return launch_for<128>(args, stream);
    case 256:
      return launch_for<256>(args, stream);
    default:
      throw EngineError("qk_norm_rope_cache: head_dim " + std::to_string(args.head_dim) +
                        " is not supported (64, 128 or 256)");
  }
}

}  // namespace nanovllm::cuda
