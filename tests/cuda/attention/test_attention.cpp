// Paged attention kernels against an fp64 host reference of the same bf16 inputs.
//
// Tolerances: the output is bf16 (half an ulp is 2^-9 relative), and the prefill rounds the softmax weights P
// to bf16 before P.V (another <= 2^-9 relative per weight, so <= 2^-9 * max|v| absolute). With |v| <= 1 the
// error is bounded by ~4e-3 absolute and lands near 1e-3..3e-3 relative; a wrong index or mask gives O(0.1..1).
// We allow 1e-2 relative and 1.5e-2 absolute.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attention_problem.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_decode_plan.cuh"
#include "common/error.h"
#include "common/half_float.h"
#include "late_writer.h"
#include "prefill_kernels.h"

namespace nanovllm::attention_test {
namespace {

constexpr double kRelTolerance = 1e-2;
constexpr double kAbsTolerance = 1.5e-2;
// The FP8-products kernel rounds Q (per row) and P to E4M3 besides the cache's codes: 3 mantissa bits where bf16
// has 8. Bounds stated before its first run: relative L2 3e-2, largest difference 6e-2. An H200 measured relative
// 0.029-0.030 on every case and a largest difference of up to 0.081 (eight cases of 30 over 0.06): the bound on
// the largest difference is 0.12. A wrong key order, scale or tile gives errors of order 1.
constexpr double kFp8ProductsRelTolerance = 3e-2;
constexpr double kFp8ProductsAbsTolerance = 0.12;

bool have_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define REQUIRE_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device"

int device_sms() {
  int count = 0;
  check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0), "multiprocessor count");
  return count;
}

// For argument checks that throw before the grid is sized.
constexpr int kAnySmCount = 132;

// kPrefill: the kernel the engine runs, and on Hopper every other prefill kernel too, each against the same
// reference (prefill_kernels_to_compare).
enum class Kernel { kDecode, kPrefill };

// The prefill kernel the CUDA backend picks for this device (asked once).
cuda::PrefillKernel engine_prefill_kernel() {
  static const cuda::PrefillKernel kernel = cuda::prefill_kernel_for_device();
  return kernel;
}

struct KernelComparison {
  std::string kernel;
  Comparison c;
};

// A decode launch's workspace for problem p: reset() poisons the partials (a read of one never written shows) and
// zeroes the arrival counters at its end, as the engine leaves them between launches.
struct DecodeWorkspace {
  size_t bytes = 0, counter_bytes = 0;
  DevicePtr memory;

  explicit DecodeWorkspace(const Problem& p)
      : bytes(cuda::decode_workspace_bytes(static_cast<int>(p.seqs.size()), p.num_heads, p.head_dim, device_sms())),
        counter_bytes(cuda::decode_workspace_counter_bytes(static_cast<int>(p.seqs.size()), p.num_kv_heads)),
        memory(device_alloc(bytes)) {}
  char* data() const { return static_cast<char*>(memory.get()); }
  void reset() const {
    check(cudaMemset(data(), 0xff, std::max<size_t>(bytes, 16)), "poison workspace");
    if (bytes) check(cudaMemset(data() + bytes - counter_bytes, 0, counter_bytes), "zero counters");
  }
};

// Decode: one comparison (and the replay checks below). Prefill: one per kernel of prefill_kernels_to_compare.
std::vector<KernelComparison> run_case(const Problem& p, Kernel kernel) {
  const HostBatch host = make_batch(p);
  DeviceBatch dev = upload(p, host);
  std::vector<std::pair<std::string, std::vector<uint16_t>>> outs;
  if (kernel == Kernel::kDecode) {
    const DecodeWorkspace workspace(p);
    char* ws = workspace.data();
    const size_t ws_bytes = workspace.bytes, counter_bytes = workspace.counter_bytes;
    // Every key loop that takes these arguments (the tensor-core one only where it applies).
    std::vector<cuda::DecodeKernel> loops = {cuda::DecodeKernel::kCudaCores};
    if (cuda::decode_kernel_for(dev.args, cuda::DecodeKernel::kTensorCores) == cuda::DecodeKernel::kTensorCores)
      loops.push_back(cuda::DecodeKernel::kTensorCores);
    for (const cuda::DecodeKernel loop : loops) {
      const std::string name =
          loop == cuda::DecodeKernel::kTensorCores ? "decode (tensor cores)" : "decode (CUDA cores)";
      poison_output(dev);
      workspace.reset();
      cuda::paged_attention_decode(dev.args, ws, ws_bytes, device_sms(), nullptr, loop);
      outs.emplace_back(name, download_output(dev));
      // A second launch on the same workspace (as a graph replay does) finds the counters back at zero and
      // writes the same bits.
      poison_output(dev);
      cuda::paged_attention_decode(dev.args, ws, ws_bytes, device_sms(), nullptr, loop);
      EXPECT_EQ(download_output(dev), outs.back().second)
          << name << ", second launch on the same workspace: " << p.describe();
      if (ws_bytes) {
        std::vector<int> counters(counter_bytes / sizeof(int));
        check(cudaMemcpy(counters.data(), ws + ws_bytes - counter_bytes, counter_bytes, cudaMemcpyDeviceToHost),
              "download counters");
        EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), static_cast<long>(counters.size()))
            << name << ", arrival counters not back at zero: " << p.describe();
      }
    }
  } else {
    // The FP8 cache's bf16 shadow, poisoned, for every kernel as the engine gives it (kWgmma takes it for long
    // prompts; kWgmmaFp8Shadow always): a shadow position the decode does not write would show as NaN.
    const size_t shadow_bytes = dev.args.fp8_cache ? cuda::fp8_prefill_shadow_bytes(dev.args) : 0;
    DevicePtr shadow = device_alloc(std::max<size_t>(shadow_bytes, 16));
    for (const cuda::PrefillKernel prefill : prefill_kernels_to_compare(engine_prefill_kernel(), dev.args)) {
      poison_output(dev);
      check(cudaMemset(shadow.get(), 0xff, std::max<size_t>(shadow_bytes, 16)), "poison shadow");
      cuda::paged_attention_prefill(dev.args, nullptr, prefill, shadow.get(), shadow_bytes);
      outs.emplace_back("prefill " + prefill_kernel_name(prefill, dev.args), download_output(dev));
    }
  }
  const std::vector<double> ref = reference_attention(p, host);
  std::vector<KernelComparison> comparisons;
  for (const auto& [name, out] : outs) {
    comparisons.push_back({name, compare(out, ref, static_cast<size_t>(p.num_heads) * p.head_dim)});
    std::printf("[attn] %s %s: %s\n", name.c_str(), p.describe().c_str(), comparisons.back().c.str().c_str());
  }
  return comparisons;
}

void expect_close(const Problem& p, Kernel kernel) {
  for (const auto& [name, c] : run_case(p, kernel)) {
    EXPECT_EQ(c.unwritten, 0u) << name << " " << p.describe();
    EXPECT_EQ(c.guard_touched, 0u) << name << " " << p.describe();
    const bool fp8_products = name.find("FP8 products") != std::string::npos;
    EXPECT_LE(c.rel, fp8_products ? kFp8ProductsRelTolerance : kRelTolerance) << name << " " << p.describe();
    EXPECT_LE(c.max_abs, fp8_products ? kFp8ProductsAbsTolerance : kAbsTolerance) << name << " " << p.describe();
  }
}

std::vector<SeqSpec> decode_seqs(const std::vector<int>& lengths) {
  std::vector<SeqSpec> seqs;
  for (int len : lengths) seqs.push_back({1, len});
  return seqs;
}

// ---- Argument checks (no device needed) ---------------------------------------------------------------------

cuda::PagedAttentionArgs plausible_args() {
  cuda::PagedAttentionArgs a;
  alignas(16) static const int dummy[4] = {};
  a.q = reinterpret_cast<const __nv_bfloat16*>(dummy);
  a.k_cache = a.v_cache = dummy;
  a.out = reinterpret_cast<__nv_bfloat16*>(const_cast<int*>(dummy));
  a.cu_seqlens_q = a.seq_lens_k = a.block_tables = dummy;
  a.num_seqs = 1;
  a.max_seqlen_q = 1;
  a.max_seqlen_k = 16;
  a.max_blocks_per_seq = 1;
  a.block_size = 16;
  a.num_heads = 2;
  a.num_kv_heads = 1;
  a.head_dim = 128;
  return a;
}

TEST(AttentionArgs, RejectsUnsupportedHeadDim) {
  auto a = plausible_args();
  a.head_dim = 96;
  EXPECT_THROW(cuda::paged_attention_prefill(a, nullptr, cuda::PrefillKernel::kMmaSync), EngineError);
  EXPECT_THROW(cuda::paged_attention_decode(a, nullptr, 0, kAnySmCount, nullptr), EngineError);
}

// The shapes a model may have that the kernels cannot run, named (the backend refuses such a model at load).
TEST(AttentionArgs, UnsupportedHeadsAreNamed) {
  EXPECT_EQ(cuda::unsupported_attention_heads(16, 8, 128), "");
  EXPECT_EQ(cuda::unsupported_attention_heads(32, 4, 64), "");
  EXPECT_EQ(cuda::unsupported_attention_heads(8, 1, 64), "");
  EXPECT_EQ(cuda::unsupported_attention_heads(4, 2, 32), "head_dim 32 (the attention kernels take 64 or 128)");
  EXPECT_NE(cuda::unsupported_attention_heads(8, 8, 256).find("head_dim 256"), std::string::npos);
  EXPECT_NE(cuda::unsupported_attention_heads(32, 2, 128).find("16 query heads per KV head"), std::string::npos);
  EXPECT_NE(cuda::unsupported_attention_heads(12, 8, 128).find("12 query heads over 8 KV heads"), std::string::npos);
}

TEST(AttentionArgs, RejectsBadFp8Scales) {
  for (float bad : {0.0f, -1.0f, INFINITY, NAN}) {
    cuda::PagedAttentionArgs a = plausible_args();
    a.fp8_cache = true;
    a.v_scale = bad;
    EXPECT_THROW(cuda::paged_attention_prefill(a, nullptr, cuda::PrefillKernel::kMmaSync), EngineError) << bad;
    a.v_scale = 1.0f;
    a.k_scale = bad;
    EXPECT_THROW(cuda::paged_attention_decode(a, nullptr, 0, kAnySmCount, nullptr), EngineError) << bad;
  }
}

TEST(AttentionArgs, RejectsBadBlockSize) {
  for (int bs : {8, 24, 512}) {
    auto a = plausible_args();
    a.block_size = bs;
    a.max_blocks_per_seq = 4;
    EXPECT_THROW(cuda::paged_attention_prefill(a, nullptr, cuda::PrefillKernel::kMmaSync), EngineError) << bs;
  }
}

// The warp-specialised kernel takes d = 128, a bf16 cache and blocks of 64 keys or more; forced on anything else
// it says why instead of launching (plausible_args has blocks of 16).
TEST(AttentionArgs, WarpSpecializedPrefillNamesWhatItNeeds) {
  auto a = plausible_args();
  EXPECT_FALSE(cuda::prefill_warp_specialized_supports(a));
  try {
    cuda::paged_attention_prefill(a, nullptr, cuda::PrefillKernel::kWgmmaWarpSpecialized);
    ADD_FAILURE() << "no error for block_size 16";
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find("block_size 16"), std::string::npos) << e.what();
  }
  a.block_size = 64;
  EXPECT_TRUE(cuda::prefill_warp_specialized_supports(a));
  a.fp8_cache = true;
  EXPECT_FALSE(cuda::prefill_warp_specialized_supports(a));
  a.fp8_cache = false;
  a.head_dim = 64;
  EXPECT_FALSE(cuda::prefill_warp_specialized_supports(a));
}

// Which FP8-cache launches go through a shadow, how large it is, and what a forced path says where it cannot run.
TEST(AttentionArgs, Fp8ShadowPathsApplyWhereTheyCan) {
  using cuda::PrefillKernel;
  auto a = plausible_args();
  a.fp8_cache = true;
  a.block_size = 256;
  a.num_seqs = 3;
  a.num_heads = 16;
  a.num_kv_heads = 8;
  a.max_seqlen_k = 5000;
  a.max_blocks_per_seq = 20;
  a.max_seqlen_q = 2048;  // short prompts: the engine's kernel keeps them
  EXPECT_FALSE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kWgmma));
  EXPECT_TRUE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kWgmmaFp8Shadow));
  EXPECT_TRUE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kWgmmaFp8Mma));
  a.max_seqlen_q = 2049;
  EXPECT_TRUE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kWgmma));
  EXPECT_FALSE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kMmaSync));
  // bf16 shadow: 3 x 20 blocks of 256 x 8 x 128 values, K and V, and the block table; packed FP8 tiles: 3 x 8 x 40
  // tiles of 16 KB, K and V. The larger is what the caller provides.
  const size_t bf16_shadow = 2 * (3 * 20 * 256 * 8 * 128 * size_t{2}) + 256;
  const size_t packed = 2 * (3 * 8 * 40 * size_t{16384});
  EXPECT_EQ(cuda::fp8_prefill_shadow_bytes(a), std::max(bf16_shadow, packed));
  a.block_size = 32;  // the bf16 shadow's TMA boxes need 64 keys a block; the packed tiles do not
  EXPECT_FALSE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kWgmma));
  EXPECT_TRUE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kWgmmaFp8Mma));
  a.block_size = 256;
  const auto error_of = [](const cuda::PagedAttentionArgs& args, PrefillKernel kernel) -> std::string {
    try {
      cuda::paged_attention_prefill(args, nullptr, kernel, nullptr, 0);
    } catch (const EngineError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(a, PrefillKernel::kWgmmaFp8Mma).find("bytes of shadow, got 0"), std::string::npos)
      << error_of(a, PrefillKernel::kWgmmaFp8Mma);
  EXPECT_NE(error_of(a, PrefillKernel::kWgmmaFp8Shadow).find("bytes of shadow, got 0"), std::string::npos)
      << error_of(a, PrefillKernel::kWgmmaFp8Shadow);
  a.head_dim = 64;
  EXPECT_FALSE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kWgmmaFp8Shadow));
  EXPECT_FALSE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kWgmmaFp8Mma));
  a.head_dim = 128;
  a.fp8_cache = false;
  EXPECT_FALSE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kWgmma));
  EXPECT_FALSE(cuda::fp8_prefill_shadow_applies(a, PrefillKernel::kWgmmaFp8Mma));
  EXPECT_NE(error_of(a, PrefillKernel::kWgmmaFp8Mma).find("needs an FP8 cache and head_dim 128"), std::string::npos)
      << error_of(a, PrefillKernel::kWgmmaFp8Mma);
  EXPECT_NE(error_of(a, PrefillKernel::kWgmmaFp8Shadow).find("needs an FP8 cache"), std::string::npos)
      << error_of(a, PrefillKernel::kWgmmaFp8Shadow);
}

// kWgmma takes the warp-specialised kernel for prompts over 2,048 query rows where it applies (where it measured
// faster), the two-stage kernel for everything else.
TEST(AttentionArgs, WgmmaTakesTheWarpSpecializedKernelForLongPromptsOnly) {
  using cuda::PrefillKernel;
  auto a = plausible_args();
  a.block_size = 256;
  a.max_seqlen_q = 2049;
  EXPECT_EQ(cuda::wgmma_prefill_variant(a), PrefillKernel::kWgmmaWarpSpecialized);
  a.max_seqlen_q = 2048;
  EXPECT_EQ(cuda::wgmma_prefill_variant(a), PrefillKernel::kWgmmaTwoStage);
  a.max_seqlen_q = 32768;
  a.fp8_cache = true;
  EXPECT_EQ(cuda::wgmma_prefill_variant(a), PrefillKernel::kWgmmaTwoStage);
  a.fp8_cache = false;
  a.head_dim = 64;
  EXPECT_EQ(cuda::wgmma_prefill_variant(a), PrefillKernel::kWgmmaTwoStage);
  a.head_dim = 128;
  a.block_size = 32;
  EXPECT_EQ(cuda::wgmma_prefill_variant(a), PrefillKernel::kWgmmaTwoStage);
}

TEST(AttentionArgs, RejectsHeadsNotMultipleOfKvHeads) {
  auto a = plausible_args();
  a.num_heads = 3;
  a.num_kv_heads = 2;
  EXPECT_THROW(cuda::paged_attention_decode(a, nullptr, 0, kAnySmCount, nullptr), EngineError);
}

TEST(AttentionArgs, RejectsDecodeGroupAboveEight) {
  auto a = plausible_args();
  a.num_heads = 16;
  a.num_kv_heads = 1;
  EXPECT_THROW(cuda::paged_attention_decode(a, nullptr, 0, kAnySmCount, nullptr), EngineError);
}

// Which key loop runs: tensor cores at head_dim 128 (bf16 or FP8 cache) whatever the batch (kAuto), or when
// asked and they apply; CUDA cores otherwise.
TEST(AttentionArgs, DecodeKeyLoopChoice) {
  using cuda::DecodeKernel;
  auto a = plausible_args();
  a.head_dim = 128;
  a.num_kv_heads = 8;
  for (const int group : {1, 2, 4, 8}) {
    a.num_heads = 8 * group;
    for (const int seqs : {1, 16, 31, 32, 256}) {
      a.num_seqs = seqs;
      EXPECT_EQ(cuda::decode_kernel_for(a, DecodeKernel::kAuto), DecodeKernel::kTensorCores) << group << " " << seqs;
      EXPECT_EQ(cuda::decode_kernel_for(a, DecodeKernel::kTensorCores), DecodeKernel::kTensorCores) << group;
      EXPECT_EQ(cuda::decode_kernel_for(a, DecodeKernel::kCudaCores), DecodeKernel::kCudaCores) << group;
    }
  }
  a.num_seqs = 1;
  a.fp8_cache = true;  // codes too
  EXPECT_EQ(cuda::decode_kernel_for(a, DecodeKernel::kTensorCores), DecodeKernel::kTensorCores);
  EXPECT_EQ(cuda::decode_kernel_for(a, DecodeKernel::kAuto), DecodeKernel::kTensorCores);
  a.head_dim = 64;
  EXPECT_EQ(cuda::decode_kernel_for(a, DecodeKernel::kTensorCores), DecodeKernel::kCudaCores);
  EXPECT_EQ(cuda::decode_kernel_for(a, DecodeKernel::kAuto), DecodeKernel::kCudaCores);
}

TEST(AttentionArgs, RejectsTooFewBlocksForBound) {
  auto a = plausible_args();
  a.max_seqlen_k = 17;
  EXPECT_THROW(cuda::paged_attention_prefill(a, nullptr, cuda::PrefillKernel::kMmaSync), EngineError);
}

TEST(AttentionArgs, RejectsMoreSequencesThanDecodeTakes) {
  cuda::PagedAttentionArgs a = plausible_args();
  a.num_seqs = cuda::decode_max_num_seqs() + 1;
  a.max_seqlen_q = 1;
  try {
    cuda::paged_attention_decode(a, nullptr, 0, kAnySmCount, nullptr);
    FAIL() << "expected EngineError";
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find("1025 sequences; at most 1024"), std::string::npos) << e.what();
  }
}

TEST(AttentionArgs, RejectsDecodeWithoutMultiprocessors) {
  const cuda::PagedAttentionArgs a = plausible_args();
  try {
    cuda::paged_attention_decode(a, nullptr, 0, 0, nullptr);
    FAIL() << "expected EngineError";
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find("sm_count 0"), std::string::npos) << e.what();
  }
}

TEST(AttentionArgs, WorkspaceGrowsWithSequencesAndSms) {
  using cuda::attention_detail::decode_workspace_floats;
  EXPECT_GT(decode_workspace_floats(512, 16, 128, 132), decode_workspace_floats(256, 16, 128, 132));
  EXPECT_GT(decode_workspace_floats(8, 16, 128, 132), decode_workspace_floats(8, 16, 128, 108));
  EXPECT_EQ(decode_workspace_floats(0, 16, 128, 132), 0u);
}

// The kernel's walk over its range (decode_split_kernel), on the host: the first sequence whose last range is at
// least r, then sequences while their first range is at most r. Each piece: (sequence, begin, end, count, slot).
struct HostPiece {
  int seq, begin, end, count, first_slot, slot;
};

// Where each sequence's keys start in the step's layout (keys and gaps), and the layout's positions.
std::vector<long long> key_starts(const std::vector<int>& lens, long long& total) {
  using namespace cuda::attention_detail;
  std::vector<long long> starts;
  total = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    const long long end = total + seq_positions(static_cast<int>(i), lens[i]);
    const SeqKeys keys = seq_keys(static_cast<int>(i), total, end);
    EXPECT_EQ(keys.len, lens[i]);
    starts.push_back(keys.prefix);
    total = end;
  }
  return starts;
}

std::vector<HostPiece> pieces_of_range(const std::vector<int>& lens, int num_ranges, int range) {
  using namespace cuda::attention_detail;
  long long total = 0;
  const std::vector<long long> starts = key_starts(lens, total);
  const DecodeRanges ranges = make_ranges(total, num_ranges, *std::max_element(lens.begin(), lens.end()));
  std::vector<HostPiece> pieces;
  if (range >= ranges.used) return pieces;
  size_t i = 0;
  while (i < lens.size() && seq_ranges(starts[i], lens[i], ranges).last < range) ++i;
  for (; i < lens.size(); ++i) {
    const SeqRanges held = seq_ranges(starts[i], lens[i], ranges);
    if (held.first > range) break;
    const KeySpan keys = range_keys(starts[i], lens[i], range, ranges);
    if (keys.begin < keys.end || lens[i] == 0) {
      const int seq = static_cast<int>(i);
      pieces.push_back({seq, keys.begin, keys.end, held.last - held.first + 1, seq + held.first, seq + range});
    }
  }
  return pieces;
}

// Every key of every sequence is attended once, by ranges of nearly equal keys; a sequence's pieces are as many
// as its count says, in consecutive unique slots below the bound; a sequence without keys is written once.
TEST(AttentionArgs, RangesCoverEveryKeyOnce) {
  using namespace cuda::attention_detail;
  std::mt19937 rng(21);
  const std::vector<std::vector<int>> fixed = {
      {1}, {32768}, {0}, {0, 0, 5}, {64, 0, 64}, {1, 2, 17, 255, 256, 257, 1000, 3000}, {63, 1, 63, 1, 0}};
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<int> lens;
    if (trial < static_cast<int>(fixed.size())) {
      lens = fixed[trial];
    } else {
      const int n = std::uniform_int_distribution<int>(1, 600)(rng);
      const int longest = std::uniform_int_distribution<int>(1, 5000)(rng);
      for (int i = 0; i < n; ++i) lens.push_back(std::uniform_int_distribution<int>(0, longest)(rng));
    }
    const int n = static_cast<int>(lens.size());
    for (int num_ranges : {1, 2, 7, 115, 264}) {
      std::vector<std::vector<int>> hits(n);
      std::vector<int> pieces(n, 0), zero_owners(n, 0);
      std::set<int> slots;
      long long total = 0;
      const std::vector<long long> starts = key_starts(lens, total);
      const int longest = *std::max_element(lens.begin(), lens.end());
      const DecodeRanges ranges = make_ranges(total, num_ranges, longest);
      ASSERT_LE(ranges.used, num_ranges);
      for (int i = 0; i < n; ++i) hits[i].assign(lens[i], 0);
      for (int r = 0; r < num_ranges; ++r) {
        long long keys_in_range = 0;
        int pieces_with_keys = 0;
        const std::vector<HostPiece> list = pieces_of_range(lens, num_ranges, r);
        for (const HostPiece& p : list) {
          ASSERT_EQ(p.begin % kDecodeChunkAlign, 0);
          if (lens[p.seq] == 0) ++zero_owners[p.seq];
          if (p.end > p.begin) ++pieces_with_keys;
          // A split sequence's first and last pieces are never shorter than a boundary moves to its ends.
          const int len = lens[p.seq];
          if (p.count > 1 && p.begin == 0) {
            ASSERT_GT(p.end, snap_to_start(len, ranges.keys_per_range)) << "seq " << p.seq;
          }
          if (p.count > 1 && p.end == len) {
            ASSERT_GE(p.end - p.begin, snap_to_end(len, ranges.keys_per_range)) << "seq " << p.seq;
          }
          for (int k = p.begin; k < p.end; ++k) ++hits[p.seq][k];
          keys_in_range += p.end - p.begin;
          ++pieces[p.seq];
          ASSERT_GE(p.slot, p.first_slot);
          ASSERT_LT(p.slot, p.first_slot + p.count);
          ASSERT_LT(static_cast<size_t>(p.slot), decode_slot_bound(n, num_ranges));
          if (p.count > 1) {
            ASSERT_TRUE(slots.insert(p.slot).second) << "slot " << p.slot << " used twice";
          }
        }
        // Aligning a sequence's start moves at most kDecodeChunkAlign - 1 keys across each boundary, and moving a
        // boundary to a sequence's end at most kDecodeSnapKeys.
        const long long most = ranges.keys_per_range + 2 * kDecodeSnapKeys + kDecodeChunkAlign - 1;
        ASSERT_LE(keys_in_range, most) << "range " << r;
        // Every piece after a range's first starts a sequence, whose gap lies within the range or just before it:
        // a range of many short sequences holds fewer keys.
        ASSERT_LE(keys_in_range + static_cast<long long>(std::max(pieces_with_keys - 1, 0)) * kDecodePieceCost,
                  most + kDecodeChunkAlign)
            << "range " << r << ", " << pieces_with_keys << " pieces";
      }
      for (int i = 0; i < n; ++i) {
        for (int k = 0; k < lens[i]; ++k) ASSERT_EQ(hits[i][k], 1) << "seq " << i << " key " << k;
        if (lens[i] == 0) {
          ASSERT_EQ(zero_owners[i], 1) << "seq " << i;
        }
        const SeqRanges held = seq_ranges(starts[i], lens[i], ranges);
        ASSERT_EQ(pieces[i], held.last - held.first + 1) << "seq " << i;
        if (lens[i] <= kDecodeWholeKeys) {
          ASSERT_EQ(pieces[i], 1) << "seq " << i << " of " << lens[i] << " keys is cut";
        }
        ASSERT_LE(pieces[i], kDecodeMaxPieces + 1) << "seq " << i;
      }
    }
  }
}

// The fp64 reference of this test and CpuBackend::paged_attention read the contract of backend.h the same way
// (positions, GQA mapping, block tables), on a batch with chunked prefill, prefix hits and decode rows.
TEST(AttentionReference, AgreesWithCpuBackend) {
  Problem p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.block_size = 16;
  p.seqs = {{1, 1}, {17, 17}, {5, 40}, {1, 100}, {33, 33}};
  const HostBatch b = make_batch(p);
  const auto to_float = [](const std::vector<uint16_t>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_float(v[i]);
    return f;
  };
  std::vector<float> q = to_float(b.q), k = to_float(b.k_cache), v = to_float(b.v_cache);
  std::vector<int> cu = b.cu_seqlens_q, lens = b.seq_lens_k, tables = b.block_tables;
  std::vector<float> out(b.q.size(), 0.f);
  const int64_t n = static_cast<int64_t>(p.seqs.size());
  KvCacheLayer cache{Tensor(k.data(), DType::F32, {b.num_blocks, p.block_size, p.num_kv_heads, p.head_dim}),
                     Tensor(v.data(), DType::F32, {b.num_blocks, p.block_size, p.num_kv_heads, p.head_dim})};
  AttentionBatch batch;
  batch.cu_seqlens_q = Tensor(cu.data(), DType::I32, {n + 1});
  batch.seq_lens_k = Tensor(lens.data(), DType::I32, {n});
  batch.block_tables = Tensor(tables.data(), DType::I32, {n, b.max_blocks_per_seq});
  batch.num_seqs = static_cast<int>(n);
  batch.max_seqlen_q = b.max_seqlen_q;
  batch.max_seqlen_k = b.max_seqlen_k;
  batch.max_blocks_per_seq = b.max_blocks_per_seq;
  batch.block_size = p.block_size;
  Tensor q_t(q.data(), DType::F32, {b.total_q, static_cast<int64_t>(p.num_heads) * p.head_dim});
  Tensor out_t(out.data(), DType::F32, {b.total_q, static_cast<int64_t>(p.num_heads) * p.head_dim});
  CpuBackend cpu(2);
  cpu.paged_attention(q_t, cache, batch, p.num_heads, p.num_kv_heads, p.head_dim, b.scale, out_t);
  const std::vector<double> ref = reference_attention(p, b);
  double max_abs = 0;
  for (size_t i = 0; i < ref.size(); ++i) max_abs = std::max(max_abs, std::abs(static_cast<double>(out[i]) - ref[i]));
  EXPECT_LT(max_abs, 1e-4);  // fp32 against fp64 on identical inputs
}

// ---- Decode -----------------------------------------------------------------------------------------------

struct SweepParam {
  int head_dim, group, block_size;
};

std::string sweep_name(const testing::TestParamInfo<SweepParam>& info) {
  return "d" + std::to_string(info.param.head_dim) + "_gqa" + std::to_string(info.param.group) + "_bs" +
         std::to_string(info.param.block_size);
}

std::vector<SweepParam> all_sweep_params() {
  std::vector<SweepParam> v;
  for (int d : {64, 128})
    for (int g : {1, 2, 3, 4, 6, 8})
      for (int bs : {16, 32, 64, 128, 256}) v.push_back({d, g, bs});
  return v;
}

class DecodeSweep : public testing::TestWithParam<SweepParam> {};

// A sweep point's heads (two KV heads) and block size; the caller adds the sequences.
Problem sweep_problem(const SweepParam& sp, uint64_t seed_base, bool fp8) {
  Problem p;
  p.num_kv_heads = 2;
  p.num_heads = 2 * sp.group;
  p.head_dim = sp.head_dim;
  p.block_size = sp.block_size;
  p.seed = seed_base + sp.head_dim + sp.group * 7 + sp.block_size;
  p.fp8 = fp8;
  return p;
}

TEST_P(DecodeSweep, MixedLengthsManySplits) {
  REQUIRE_DEVICE();
  Problem p = sweep_problem(GetParam(), 100, false);
  p.seqs = decode_seqs({1, 2, 17, 255, 256, 257, 1000, 3000});
  expect_close(p, Kernel::kDecode);
}

// The same with an FP8 cache (scales that are not powers of two); the reference attends the dequantised codes.
TEST_P(DecodeSweep, Fp8MixedLengthsManySplits) {
  REQUIRE_DEVICE();
  Problem p = sweep_problem(GetParam(), 500, true);
  p.seqs = decode_seqs({1, 2, 17, 255, 256, 257, 1000, 3000});
  expect_close(p, Kernel::kDecode);
}

INSTANTIATE_TEST_SUITE_P(Attention, DecodeSweep, testing::ValuesIn(all_sweep_params()), sweep_name);

// FP8 at both ends of the range plan: one long sequence (cut over every range) and a large batch (several
// sequences per range).
TEST(Decode, Fp8LongSequenceAndLargeBatch) {
  REQUIRE_DEVICE();
  for (const std::vector<int>& lengths : {std::vector<int>{32768}, std::vector<int>(300, 700)}) {
    Problem p;
    p.num_heads = 16;
    p.num_kv_heads = 8;
    p.head_dim = 128;
    p.block_size = 256;
    p.seqs = decode_seqs(lengths);
    p.seed = 77 + lengths.size();
    p.fp8 = true;
    expect_close(p, Kernel::kDecode);
  }
}

// The FP8 decode multiplies half pairs after scaling each head's query by a power of two: scales far from one
// (saturated codes of tiny values, large codes of large ones) must not overflow or lose the scores.
TEST(Decode, Fp8ScalesFarFromOne) {
  REQUIRE_DEVICE();
  for (const float scale : {1e-4f, 30.0f}) {
    for (int group : {2, 4}) {
      Problem p;
      p.num_kv_heads = 2;
      p.num_heads = 2 * group;
      p.head_dim = 128;
      p.block_size = 16;
      p.seqs = decode_seqs({1, 77, 1000});
      p.fp8 = true;
      p.k_scale = scale;
      p.v_scale = scale;
      p.seed = 60 + group;
      SCOPED_TRACE("scale " + std::to_string(scale) + ", group " + std::to_string(group));
      expect_close(p, Kernel::kDecode);
    }
  }
}

// Many sequences per range (520 sequences x 8 KV heads): most are written directly by the one CTA holding
// them, those cut by range boundaries are merged.
TEST(Decode, LargeBatchManySequencesPerRange) {
  REQUIRE_DEVICE();
  std::mt19937 rng(7);
  for (int d : {64, 128}) {
    Problem p;
    p.num_heads = 16;
    p.num_kv_heads = 8;
    p.head_dim = d;
    p.block_size = 32;
    std::uniform_int_distribution<int> len(1, 700);
    std::vector<int> lengths;
    for (int i = 0; i < 520; ++i) lengths.push_back(len(rng));  // 520 x 8 KV heads = 4160 CTAs
    lengths[3] = 256;
    lengths[4] = 257;
    p.seqs = decode_seqs(lengths);
    p.seed = 11 + d;
    expect_close(p, Kernel::kDecode);
  }
}

// A large batch of short sequences and a few long ones: the long ones are cut over several ranges and merged,
// the short ones mostly written by one CTA each.
TEST(Decode, LongSequencesAmongShort) {
  REQUIRE_DEVICE();
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> len(1, 300);
  std::vector<int> lengths;
  for (int i = 0; i < 260; ++i) lengths.push_back(len(rng));
  lengths[0] = 2000;
  lengths[5] = 1500;
  lengths[6] = 385;
  Problem p;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.block_size = 16;
  p.seqs = decode_seqs(lengths);
  p.seed = 13;
  expect_close(p, Kernel::kDecode);
}

// Few sequences of very different lengths and a bound far above them (a decode graph of 8B shapes under tensor
// parallelism): the longest are cut over many ranges, the shortest share one.
TEST(Decode, FewSequencesOverManyRanges) {
  REQUIRE_DEVICE();
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> len(1, 6000);
  std::vector<int> lengths;
  for (int i = 0; i < 32; ++i) lengths.push_back(len(rng));
  lengths[0] = 6000;
  lengths[1] = 1;
  lengths[2] = 129;
  Problem p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 128;
  p.block_size = 16;
  p.seqs = decode_seqs(lengths);
  p.extra_bound_k = 2000;
  p.seed = 17;
  expect_close(p, Kernel::kDecode);
}

// One long sequence cut into the most pieces a sequence may have (kDecodeMaxPieces), merged by the last CTA for
// every group size and head size: the merge spreads the pieces of each output item over 1-8 threads depending on
// G and D, so each layout of that work is checked with many pieces per thread. An odd length ends mid-block.
TEST(Decode, OneLongSequenceMergedForEveryGroup) {
  REQUIRE_DEVICE();
  for (int d : {64, 128}) {
    for (int group : {1, 2, 3, 4, 8}) {
      Problem p;
      p.num_kv_heads = 2;
      p.num_heads = 2 * group;
      p.head_dim = d;
      p.block_size = 16;
      p.seqs = decode_seqs({12345, 3});
      p.seed = 90 + 10 * group + d;
      SCOPED_TRACE("head_dim " + std::to_string(d) + ", group " + std::to_string(group));
      expect_close(p, Kernel::kDecode);
    }
  }
}

// max_seqlen_k <= 128: one split even for one sequence.
TEST(AttentionSmall, DecodeShortSingleSplit) {
  REQUIRE_DEVICE();
  Problem p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 128;
  p.block_size = 16;
  p.seqs = decode_seqs({1, 2, 15, 16, 17, 100, 128});
  expect_close(p, Kernel::kDecode);
}

TEST(AttentionSmall, DecodeSplitsHeadDim64) {
  REQUIRE_DEVICE();
  Problem p;
  p.num_heads = 4;
  p.num_kv_heads = 1;
  p.head_dim = 64;
  p.block_size = 64;
  p.seqs = decode_seqs({1, 300, 513});
  p.extra_bound_k = 100;
  expect_close(p, Kernel::kDecode);
}

// The bound (as in a CUDA graph captured for longer sequences) is far above every real length: the ranges
// follow the real lengths, not the bound.
TEST(Decode, BoundFarAboveLengths) {
  REQUIRE_DEVICE();
  Problem p;
  p.num_heads = 8;
  p.num_kv_heads = 1;
  p.head_dim = 128;
  p.block_size = 256;
  p.seqs = decode_seqs({1, 255, 256, 257, 700});
  p.extra_bound_k = 5000;
  expect_close(p, Kernel::kDecode);
}

// Group sizes that are not powers of two (each size 1..8 has its own kernel instantiation).
TEST(Decode, OddGroupSizes) {
  REQUIRE_DEVICE();
  for (int group : {3, 5, 6}) {
    Problem p;
    p.num_kv_heads = 2;
    p.num_heads = 2 * group;
    p.head_dim = 128;
    p.block_size = 16;
    p.seqs = decode_seqs({1, 33, 257, 1000});
    p.seed = 50 + group;
    expect_close(p, Kernel::kDecode);
  }
}

// Padding sequences (q_len 0, as a batch bucket pads) produce no row and disturb nothing.
TEST(Decode, SkipsSequencesWithoutQueryRows) {
  REQUIRE_DEVICE();
  Problem p;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 128;
  p.block_size = 32;
  p.seqs = {{1, 40}, {0, 1}, {1, 600}, {0, 1}, {1, 1}};
  expect_close(p, Kernel::kDecode);
}

// In a decode step the kernel ahead of decode attention (the KV write) writes each sequence's new key and its
// queries, and decode attention starts before that kernel ends (programmatic launch), reading early only what no
// kernel of the step writes. Here the kernel ahead writes the new keys and the queries 50 us late, over NaN: any
// of them read before the wait shows.
TEST(Decode, ReadsTheStepsNewKeysAfterTheKernelAhead) {
  REQUIRE_DEVICE();
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> owned(stream, &cudaStreamDestroy);
  for (const bool fp8 : {false, true}) {
    for (const int head_dim : {64, 128}) {
      for (const int block_size : {16, 256}) {
        Problem p;
        p.num_heads = 4;
        p.num_kv_heads = 2;
        p.head_dim = head_dim;
        p.block_size = block_size;
        p.fp8 = fp8;
        p.seed = 900 + head_dim + block_size + (fp8 ? 1 : 0);
        p.seqs = decode_seqs({1, 15, 16, 17, 64, 65, 300, 1000, 4097});
        const HostBatch host = make_batch(p);
        const std::vector<double> ref = reference_attention(p, host);
        const int n = static_cast<int>(p.seqs.size());
        const size_t key_bytes = static_cast<size_t>(p.num_kv_heads) * head_dim * (fp8 ? 1 : 2);  // a slot
        const size_t q_bytes = static_cast<size_t>(p.num_heads) * head_dim * 2;                   // a row
        for (const cuda::DecodeKernel loop : {cuda::DecodeKernel::kCudaCores, cuda::DecodeKernel::kTensorCores}) {
          DeviceBatch dev = upload(p, host);
          if (cuda::decode_kernel_for(dev.args, loop) != loop) continue;
          // The true bytes move to `truth`, NaN takes their place, and the late writer puts them back.
          DevicePtr truth = device_alloc(n * (2 * key_bytes + q_bytes));
          std::vector<LateCopy> copies;
          char* next = static_cast<char*>(truth.get());
          const auto move_out = [&](void* at, size_t bytes) {
            check(cudaMemcpy(next, at, bytes, cudaMemcpyDeviceToDevice), "save");
            check(cudaMemset(at, 0xff, bytes), "poison");  // NaN in bf16 and in E4M3
            copies.push_back({at, next, static_cast<int>(bytes)});
            next += bytes;
          };
          for (int i = 0; i < n; ++i) {
            const int key = p.seqs[i].seq_len - 1;
            const size_t slot =
                static_cast<size_t>(host.block_tables[i * host.max_blocks_per_seq + key / block_size]) * block_size +
                key % block_size;
            move_out(static_cast<char*>(dev.k_cache.get()) + slot * key_bytes, key_bytes);
            move_out(static_cast<char*>(dev.v_cache.get()) + slot * key_bytes, key_bytes);
            move_out(static_cast<char*>(dev.q.get()) + host.cu_seqlens_q[i] * q_bytes, q_bytes);
          }
          DevicePtr copy_list = device_alloc(copies.size() * sizeof(LateCopy));
          check(cudaMemcpy(copy_list.get(), copies.data(), copies.size() * sizeof(LateCopy), cudaMemcpyHostToDevice),
                "copy list");
          const DecodeWorkspace workspace(p);
          workspace.reset();
          poison_output(dev);
          check(cudaDeviceSynchronize(), "setup");  // the copies and memsets above ran on the legacy stream
          launch_late_writer(static_cast<const LateCopy*>(copy_list.get()), static_cast<int>(copies.size()), 50,
                             stream);
          cuda::paged_attention_decode(dev.args, workspace.data(), workspace.bytes, device_sms(), stream, loop);
          check(cudaStreamSynchronize(stream), "decode after the late writer");
          const Comparison c = compare(download_output(dev), ref, static_cast<size_t>(p.num_heads) * head_dim);
          const std::string what =
              std::string(loop == cuda::DecodeKernel::kTensorCores ? "tensor cores " : "CUDA cores ") + p.describe();
          EXPECT_EQ(c.unwritten, 0u) << what;
          EXPECT_LE(c.rel, kRelTolerance) << what;
          EXPECT_LE(c.max_abs, kAbsTolerance) << what;
        }
      }
    }
  }
}

TEST(Decode, WorkspaceTooSmallThrows) {
  REQUIRE_DEVICE();
  Problem p;
  p.num_heads = 2;
  p.num_kv_heads = 1;
  p.head_dim = 128;
  p.block_size = 16;
  p.seqs = decode_seqs({1000});
  const HostBatch host = make_batch(p);
  DeviceBatch dev = upload(p, host);
  DevicePtr ws = device_alloc(64);
  EXPECT_THROW(cuda::paged_attention_decode(dev.args, ws.get(), 64, device_sms(), nullptr), EngineError);
}

// ---- Prefill ----------------------------------------------------------------------------------------------

class PrefillSweep : public testing::TestWithParam<SweepParam> {};

// Full prompts at tile/block boundaries, a chunked-prefill chunk, a prefix-cache hit and a decode-like row.
const std::vector<SeqSpec> kPrefillSweepSeqs = {{1, 1},     {2, 2},     {17, 17},   {64, 64}, {65, 65},  {255, 255},
                                                {256, 256}, {257, 257}, {37, 1000}, {1, 300}, {200, 456}};

TEST_P(PrefillSweep, MixedBatch) {
  REQUIRE_DEVICE();
  Problem p = sweep_problem(GetParam(), 300, false);
  p.seqs = kPrefillSweepSeqs;
  expect_close(p, Kernel::kPrefill);
}

TEST_P(PrefillSweep, Fp8MixedBatch) {
  REQUIRE_DEVICE();
  Problem p = sweep_problem(GetParam(), 700, true);
  p.seqs = kPrefillSweepSeqs;
  expect_close(p, Kernel::kPrefill);
}

INSTANTIATE_TEST_SUITE_P(Attention, PrefillSweep, testing::ValuesIn(all_sweep_params()), sweep_name);

TEST(Prefill, LongPrompts) {
  REQUIRE_DEVICE();
  for (int d : {64, 128}) {
    Problem p;
    p.num_heads = 4;
    p.num_kv_heads = 2;
    p.head_dim = d;
    p.block_size = d == 64 ? 16 : 256;
    p.seqs = {{1000, 1000}, {3000, 3000}};
    p.seed = 21 + d;
    expect_close(p, Kernel::kPrefill);
  }
}

// Chunked prefill (q rows continue a cached prefix) and prefix-cache hits of several sizes in one batch; the
// q bound is above every q_len so whole query tiles exit: 200 above hands the tiles out across sequences, 2,000
// above (past the short-prompt bound) sequence by sequence.
TEST(Prefill, ChunkedAndPrefixHits) {
  REQUIRE_DEVICE();
  for (int extra_bound_q : {200, 2000}) {
    for (bool fp8 : {false, true}) {
      Problem p;
      p.num_heads = 8;
      p.num_kv_heads = 2;
      p.head_dim = 128;
      p.block_size = 64;
      p.seqs = {{512, 3000}, {64, 1024}, {1, 3000}, {257, 2000}, {5, 5}, {128, 129}, {63, 256}};
      p.extra_bound_q = extra_bound_q;
      p.extra_bound_k = 100;
      p.fp8 = fp8;
      p.seed = fp8 ? 31 : 1;
      expect_close(p, Kernel::kPrefill);
    }
  }
}

TEST(AttentionSmall, PrefillSmallMixed) {
  REQUIRE_DEVICE();
  for (int d : {64, 128}) {
    Problem p;
    p.num_heads = 4;
    p.num_kv_heads = 2;
    p.head_dim = d;
    p.block_size = 16;
    p.seqs = {{1, 1}, {17, 17}, {70, 70}, {3, 130}, {0, 5}};
    p.extra_bound_q = 10;
    p.seed = 5 + d;
    expect_close(p, Kernel::kPrefill);
  }
}

// On Hopper the engine's prefill is the wgmma kernel (a build without sm_90a code would silently fall back).
TEST(Prefill, HopperTakesTheWgmmaKernel) {
  REQUIRE_DEVICE();
  int major = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "compute capability");
  if (major != 9) GTEST_SKIP() << "not an sm_90 device";
  EXPECT_EQ(cuda::prefill_kernel_for_device(), cuda::PrefillKernel::kWgmma);
}

// Decode and prefill compute the same function on q_len 1 rows.
TEST(AttentionSmall, PrefillAgreesOnDecodeRows) {
  REQUIRE_DEVICE();
  Problem p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 128;
  p.block_size = 32;
  p.seqs = decode_seqs({1, 2, 255, 256, 257, 600});
  expect_close(p, Kernel::kDecode);
  expect_close(p, Kernel::kPrefill);
}

}  // namespace
}  // namespace nanovllm::attention_test
