#pragma once
// How the split-KV decode divides the keys among its CTAs: arithmetic shared by the kernel, its launcher and
// the host tests.
//
// Every KV head's keys of a step are laid end to end, sequence after sequence (prefix sums of seq_lens_k), and
// cut into ranges of equal length, one per CTA, and the grid is one wave of resident CTAs. A range may end
// inside a sequence and go on into the next ones, so every CTA gets about the same work however uneven the
// lengths, and none waits for a slot or finishes long before the others. Measured on an H200 (0.6B shapes):
// grids of one CTA per sequence and KV head streamed K/V at 55-84% of copy bandwidth, depending on how uneven the
// lengths were and how full their last wave was; one wave of equal ranges at 68-98%. A queue handing out several
// smaller ranges per CTA measured slower (by the slowdown per added piece, ~1 us each). A sequence cut by range
// boundaries gets one partial per range, merged by the last CTA to finish one; a sequence inside one range is
// written directly. The grid only depends on the GPU and the number of KV heads, so a CUDA graph replays it for
// any lengths.
//
// Equal keys are not equal time: every piece of a range also pays a fixed cost (its queries, its first block-table
// entries and chunks, its partial or merge), so a range of several short sequences finished last. The keys are
// therefore laid out with a gap of kDecodePieceCost before every sequence but the first, and the ranges cut over
// keys and gaps together (step positions below): a gap is never read, it only moves the boundaries. For the same
// reason a boundary that would cut a few keys off a sequence moves to its end (cut_key).
#include <cstddef>

#include "common/host_device.h"

namespace nanovllm::cuda::attention_detail {

constexpr int kDecodeChunkAlign = 64;    // cuts fall on whole CTA iterations (32 or 64 keys)
constexpr int kDecodeMaxGroup = 8;       // query heads per KV head
constexpr int kDecodeMaxCtasPerSm = 16;  // 128-thread CTAs: 2048 threads per SM
// Ranges are at least 1/kDecodeMaxPieces of the longest sequence, so that its partials stay few enough for
// one CTA to merge them quickly. Measured on an H200 with the merge spread over the CTA's threads (1 x 32k keys,
// 0.6B heads): 32 pieces 65 us, 64 pieces 54 us, 128 pieces 53 us (FP8 cache, before its prefetch: 45 / 37 /
// 48 us).
constexpr int kDecodeMaxPieces = 64;
constexpr int kDecodeMaxSeqs = 1024;  // the kernel keeps every sequence's prefix in shared memory (8 KiB)
// A piece's fixed cost in keys' worth of streaming. On an H100 (bench_attention, lengths 100-2048) every cost from
// 64 to 512 lifted batches of 32-128 such sequences by 1-7 points of copy bandwidth, 128-256 the most, and left
// uniform lengths as they were (results.md R146). In the engine 192 made batches of 4-16 short sequences 3-11%
// faster and mixed ones 2-3% (R147); 768 gained more only where it happened to fit whole sequences to ranges
// (R148), which exact range lengths and moved cuts now do whatever the cost (R150, R152).
constexpr int kDecodePieceCost = 192;

// Positions (keys and gaps) sequence `seq` of `len` keys takes in the step's layout.
NANOVLLM_HOST_DEVICE long long seq_positions(int seq, int len) {
  return len > 0 && seq > 0 ? static_cast<long long>(len) + kDecodePieceCost : len;
}

// Where sequence `seq`'s keys start in the layout and how many it has, from its positions [begin, end).
struct SeqKeys {
  long long prefix = 0;
  int len = 0;
};

NANOVLLM_HOST_DEVICE SeqKeys seq_keys(int seq, long long begin, long long end) {
  const int positions = static_cast<int>(end - begin);
  SeqKeys k;
  const bool gap = positions > 0 && seq > 0;
  k.prefix = gap ? begin + kDecodePieceCost : begin;
  k.len = gap ? positions - kDecodePieceCost : positions;
  return k;
}

struct DecodeRanges {
  long long keys_per_range = kDecodeChunkAlign;  // positions (keys and gaps), at least kDecodeChunkAlign
  int used = 1;                                  // ranges [0, used) hold keys (at least one, for empty steps)
};

// Up to num_ranges (>= 1) ranges over a layout of `total` positions, the longest sequence having `longest` keys.
// Range r covers positions [r, r + 1) x keys_per_range, before its boundaries are moved (range_keys). The length is
// not rounded to whole CTA iterations (the cuts are): rounding it up left the last CTAs without keys and gave
// others a second sequence.
NANOVLLM_HOST_DEVICE DecodeRanges make_ranges(long long total, int num_ranges, int longest) {
  const long long by_count = (total + num_ranges - 1) / num_ranges;
  const long long by_pieces = (static_cast<long long>(longest) + kDecodeMaxPieces - 1) / kDecodeMaxPieces;
  const long long even = by_count > by_pieces ? by_count : by_pieces;
  DecodeRanges r;
  r.keys_per_range = even < kDecodeChunkAlign ? kDecodeChunkAlign : even;
  const long long used = (total + r.keys_per_range - 1) / r.keys_per_range;
  r.used = used < 1 ? 1 : static_cast<int>(used);
  return r;
}

// A range boundary that would cut a sequence within kDecodeSnapKeys keys of one of its ends moves to the nearer end
// (the end itself on a tie): a fragment that short would cost its range a piece's fixed cost for little streaming,
// and its sequence a partial and a merge. It moves at most 1/kDecodeSnapShare of a range, so that short ranges
// (few keys in the step) still spread a sequence over several CTAs, unless the sequence is kept whole (below). Batch 8
// of 128-token prompts: 0.88 -> 0.85 ms/token on an H100 (results.md R149, R150).
constexpr int kDecodeSnapKeys = kDecodePieceCost;
constexpr int kDecodeSnapShare = 2;

// A sequence of at most this many keys is never cut, however short the ranges: one CTA streams it (its first chunks
// copied before the wait for the previous kernel, attention_decode.cu) sooner than several CTAs stream their parts
// and merge them (batch 1 / 2 of 128-token prompts, 129-384 keys: 0.755 / 0.795 -> 0.735 / 0.781 ms a token on an
// H100, results.md R158).
constexpr int kDecodeWholeKeys = 2 * kDecodeSnapKeys;

// How far past a sequence's first key (snap_to_start) or before its end (snap_to_end) a cut moves to that end, in
// ranges of keys_per_range positions: up to the limit (no limit for a sequence kept whole), and short of the
// sequence's middle, so that a cut moves to at most one end.
NANOVLLM_HOST_DEVICE long long snap_span(int len, long long short_of_middle, long long keys_per_range) {
  if (len <= kDecodeWholeKeys) return short_of_middle;  // every cut moves to an end
  const long long share = keys_per_range / kDecodeSnapShare;
  const long long limit = share < kDecodeSnapKeys ? share : kDecodeSnapKeys;
  return short_of_middle < limit ? short_of_middle : limit;
}
NANOVLLM_HOST_DEVICE long long snap_to_start(int len, long long keys_per_range) {
  return snap_span(len, len > 0 ? (len - 1) / 2 : 0, keys_per_range);
}
NANOVLLM_HOST_DEVICE long long snap_to_end(int len, long long keys_per_range) {
  return snap_span(len, len > 0 ? len / 2 : 0, keys_per_range);
}

// The key at which a range boundary `offset` positions past a sequence's first key (len keys) cuts it: past its end,
// len; else the boundary rounded down to a whole CTA iteration (kDecodeChunkAlign), then moved to the nearer end
// within the snap spans.
NANOVLLM_HOST_DEVICE int cut_key(long long offset, int len, long long keys_per_range) {
  if (offset >= len) return len;
  const long long key = offset <= 0 ? 0 : offset / kDecodeChunkAlign * kDecodeChunkAlign;
  if (key <= snap_to_start(len, keys_per_range)) return 0;
  if (key >= len - snap_to_end(len, keys_per_range)) return len;
  return static_cast<int>(key);
}

// The ranges that hold keys of a sequence whose keys start at position `prefix` (seq_keys): first..last, the
// ranges whose boundaries cut_key places around its keys. A sequence without keys belongs to the range its prefix
// falls in (the last used one at the end), which writes its (zero) output. Both ends are nondecreasing from one
// sequence to the next, and first of the next is at least last of this one.
struct SeqRanges {
  int first = 0;
  int last = 0;
};

NANOVLLM_HOST_DEVICE SeqRanges seq_ranges(long long prefix, int len, const DecodeRanges& r) {
  SeqRanges s;
  const long long k = r.keys_per_range;
  if (len <= 0) {
    const long long first = prefix / k;
    s.first = static_cast<int>(first > r.used - 1 ? r.used - 1 : first);
    s.last = s.first;
    return s;
  }
  // cut_key is 0 for offsets below `to_zero` and len from `to_len` on.
  const long long align = kDecodeChunkAlign;
  const long long start_span = snap_to_start(len, k) / align * align + align;
  const long long to_zero = start_span < len ? start_span : len;
  const long long end_span = (len - snap_to_end(len, k) + align - 1) / align * align;
  const long long to_len = end_span < len ? end_span : len;
  s.first = static_cast<int>((prefix + to_zero - 1) / k);        // the last boundary cutting at key 0
  s.last = static_cast<int>((prefix + to_len + k - 1) / k - 1);  // the range before the first cutting at len
  return s;
}

// The keys [begin, end) of a sequence (starting at `prefix`, len keys) that range `range` holds; empty when it
// holds none. begin is a multiple of kDecodeChunkAlign.
struct KeySpan {
  int begin = 0;
  int end = 0;
};

NANOVLLM_HOST_DEVICE KeySpan range_keys(long long prefix, int len, int range, const DecodeRanges& r) {
  const long long boundary = range * r.keys_per_range - prefix;
  KeySpan k;
  k.begin = cut_key(boundary, len, r.keys_per_range);
  k.end = cut_key(boundary + r.keys_per_range, len, r.keys_per_range);
  return k;
}

// Partials are stored per piece: sequence i's piece in range r goes to slot i + r. Slots are unique (for
// i < j, a range of i is at most the first range of j) and below num_seqs + num_ranges; one sequence's slots
// are consecutive.
inline size_t decode_slot_bound(int num_seqs, int num_ranges) { return static_cast<size_t>(num_seqs) + num_ranges; }

// Ranges (CTAs) per KV head of a launch on a GPU of `sms` SMs whose kernel keeps per_sm CTAs resident on each.
inline int decode_num_ranges(int per_sm, int sms, int num_kv_heads) {
  const int ctas = per_sm * sms / num_kv_heads;
  return ctas > 1 ? ctas : 1;
}

// Partial floats a workspace needs for any launch of up to max_num_seqs sequences on a GPU of `sms` SMs (any
// kernel, any num_kv_heads >= 1): acc[d] + (max, sum) per slot and query head.
inline size_t decode_workspace_floats(int max_num_seqs, int num_heads, int head_dim, int sms) {
  if (max_num_seqs <= 0 || num_heads <= 0 || head_dim <= 0 || sms <= 0) return 0;
  const int max_ranges = decode_num_ranges(kDecodeMaxCtasPerSm, sms, 1);
  return decode_slot_bound(max_num_seqs, max_ranges) * num_heads * (static_cast<size_t>(head_dim) + 2);
}

}  // namespace nanovllm::cuda::attention_detail
