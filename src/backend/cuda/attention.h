#pragma once
// Paged attention kernels (bf16 in/out, fp32 math; the cache bf16 or FP8). Host-side launchers; everything is enqueued
// on `stream` and reads lengths from device memory only, so a launch can be captured in a CUDA graph and replayed with
// other lengths up to the bounds it was launched with. Layout and semantics: see AttentionBatch and
// KvCacheLayer in backend/backend.h (cache [num_blocks, block_size, nkv, d]; q/out [T, nh * d]).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace nanovllm::cuda {

struct PagedAttentionArgs {
  const __nv_bfloat16* q = nullptr;  // [T, nh * d]
  const void* k_cache = nullptr;     // bf16, or (fp8_cache) E4M3 codes of value / k_scale and value / v_scale
  const void* v_cache = nullptr;
  const int* cu_seqlens_q = nullptr;  // [num_seqs + 1]
  const int* seq_lens_k = nullptr;    // [num_seqs]
  const int* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  __nv_bfloat16* out = nullptr;       // [T, nh * d]
  int num_seqs = 0;
  int max_seqlen_q = 0;  // bounds used to size the grid
  int max_seqlen_k = 0;
  int max_blocks_per_seq = 0;
  int block_size = 0;  // 16..256, power of two
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // 64 or 128 (others: EngineError)
  float scale = 1.0f;
  bool fp8_cache = false;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  // Multiplies the warp-specialised prefill's output: 1, or an FP8 cache's v_scale where that kernel reads a bf16
  // shadow of the cache's codes (paged_attention_prefill's shadow).
  float out_scale = 1.0f;
};

// Workspace (bytes) the split-KV decode needs for up to max_num_seqs sequences on a device of sm_count
// multiprocessors, whatever their lengths. The caller allocates it once and zeroes at least its last
// decode_workspace_counter_bytes(max_num_seqs, num_kv_heads) before the first launch: they are arrival
// counters, which every launch leaves at zero again.
size_t decode_workspace_bytes(int max_num_seqs, int num_heads, int head_dim, int sm_count);
size_t decode_workspace_counter_bytes(int num_seqs, int num_kv_heads);
// The most sequences one decode launch takes.
int decode_max_num_seqs();

// The decode's key loop. kCudaCores: fp32 dot products and P.V per lane, any cache and head_dim.
// kTensorCores (head_dim 128, a bf16 or FP8 cache): the GQA group's heads as the rows of mma.sync tiles, K and V
// staged in shared memory by cp.async; its arithmetic no longer grows with the group, where the CUDA-core loop's
// does. kAuto: tensor cores at head_dim 128 (faster in the engine at every batch measured, 1 to 256 sequences),
// else CUDA cores.
enum class DecodeKernel { kAuto, kCudaCores, kTensorCores };

// The key loop `requested` runs as for these arguments (kTensorCores falls back to kCudaCores where it does not
// apply).
DecodeKernel decode_kernel_for(const PagedAttentionArgs& args, DecodeKernel requested);

// q_len == 1 for every sequence: split-KV (flash-decoding) over balanced ranges of the step's keys, one wave of
// CTAs, each computing all query heads of a GQA group; the last CTA of each (sequence, KV head) cut by range
// boundaries merges its pieces. seq_lens_k is read before the stream's previous kernel has completed
// (programmatic launch): it must be written by a copy or by a kernel that does not let its dependents start
// early. sm_count: the device's multiprocessor count (sizes the grid, one wave of CTAs).
void paged_attention_decode(const PagedAttentionArgs& args, void* workspace, size_t workspace_bytes, int sm_count,
                            cudaStream_t stream, DecodeKernel kernel = DecodeKernel::kAuto);

// Which prefill kernel runs. kMmaSync runs on every GPU; the others are sm_90a code, only for a device where
// prefill_kernel_for_device() names kWgmma. kWgmma picks per launch between its two variants: the
// warp-specialised one (TMA copies, 128-key tiles) where it applies and is faster, prompts of over 2,048 query
// rows, else the two-stage one; with an FP8 cache it takes kWgmmaFp8Shadow where that applies (below).
// kWgmmaFp8Mma (an FP8 cache, d = 128) runs both products on E4M3 tensor cores: Q quantised per row, P rounded to
// E4M3, K and V packed into tiles in the shadow first. Tests and benchmarks force each variant.
enum class PrefillKernel { kWgmma, kWgmmaTwoStage, kWgmmaWarpSpecialized, kWgmmaFp8Shadow, kWgmmaFp8Mma, kMmaSync };

// Whether kWgmmaWarpSpecialized can run these arguments: head_dim 128, a bf16 cache, blocks of 64 keys or more.
bool prefill_warp_specialized_supports(const PagedAttentionArgs& args);

// The variant kWgmma runs for these arguments: kWgmmaWarpSpecialized where it applies and the prompts are over
// 2,048 query rows, else kWgmmaTwoStage.
PrefillKernel wgmma_prefill_variant(const PagedAttentionArgs& args);

// The prefill kernel for the current device: kWgmma on an sm_90 device when this build holds sm_90a code, else
// kMmaSync. It asks the device, so callers choose once (the CUDA backend at construction) and pass the choice.
PrefillKernel prefill_kernel_for_device();

// Any q_len (prefill, chunked prefill, prefix-cache hits): causal, varlen, tensor-core MMA tiles.
// With an FP8 cache, kWgmma and prompts of over 2,048 query rows (head_dim 128, blocks of 64+ keys), the launch's
// cached blocks are first decoded into `shadow` (bf16 values of the codes, exact; positions past a sequence's
// keys zero) and the warp-specialised kernel runs on them with k_scale folded into the softmax scale and v_scale
// into the output, the same math as the FP8 kernels; where shadow_bytes is short of
// fp8_prefill_shadow_bytes(args), the FP8 kernel runs instead. kWgmmaFp8Mma packs the codes into the shadow and
// multiplies them on E4M3 tensor cores (it throws where the shadow is short).
void paged_attention_prefill(const PagedAttentionArgs& args, cudaStream_t stream, PrefillKernel kernel,
                             void* shadow = nullptr, size_t shadow_bytes = 0);

// Bytes of shadow an FP8-cache prefill of these arguments needs, whichever of the two paths takes it: the bf16
// shadow (K and V of num_seqs x ceil(max_seqlen_k / block_size) blocks and its block table) or the packed tiles
// (K and V of num_seqs x num_kv_heads x ceil(max_seqlen_k / 128) tiles of 16 KB), each part 256-byte aligned.
size_t fp8_prefill_shadow_bytes(const PagedAttentionArgs& args);
// Whether `kernel` runs these arguments through the shadow (given enough shadow bytes): kWgmmaFp8Shadow wherever it
// can (an FP8 cache, head_dim 128, blocks of 64+ keys), kWgmma where it also has prompts of over 2,048 rows,
// kWgmmaFp8Mma wherever the cache is FP8 and head_dim 128.
bool fp8_prefill_shadow_applies(const PagedAttentionArgs& args, PrefillKernel kernel);
// Whether paged_attention_prefill with `kernel` and this shadow goes through it: it applies and is large enough.
bool fp8_prefill_takes_shadow(const PagedAttentionArgs& args, PrefillKernel kernel, const void* shadow,
                              size_t shadow_bytes);

// Why the attention kernels cannot run a model with these heads, or "" when they can (head_dim 64 or 128, and a
// decode group of at most 8 query heads per KV head). The backend asks when it is set up, so that such a model
// is refused at load rather than at its first step.
std::string unsupported_attention_heads(int num_heads, int num_kv_heads, int head_dim);

}  // namespace nanovllm::cuda
