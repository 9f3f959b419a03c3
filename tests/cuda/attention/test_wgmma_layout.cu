// The wgmma prefill kernel's shared-memory tiles against the operand layouts the PTX ISA defines for its
// descriptors, on the host (no GPU needed, so CI checks it). For every element an MMA k-step reads, the
// address the hardware computes from the kernel's descriptor (the canonical 128-byte-swizzled layout, in CuTe
// terms K-major ((8,m),(T,2k)):((8T,SBO),(1,T)) and MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), then
// Swizzle<3,4,3> on the byte address) must be where the kernel's copies put that element (panel_offset).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/attention_prefill_hopper.h"
#include "backend/cuda/attention_wgmma.cuh"

namespace nanovllm::cuda::attention_detail {
namespace {

constexpr int kT = 8;                     // bf16 values in 16 bytes
constexpr uint32_t kTileBase = 3 * 8192;  // a panel-aligned shared address, as the kernel's tiles have

struct Fields {
  uint32_t start;    // bytes
  uint32_t leading;  // bytes
  uint32_t stride;   // bytes
  int swizzle;
};

Fields decode(uint64_t desc) {
  return {static_cast<uint32_t>(desc & 0x3fff) << 4, static_cast<uint32_t>((desc >> 16) & 0x3fff) << 4,
          static_cast<uint32_t>((desc >> 32) & 0x3fff) << 4, static_cast<int>(desc >> 62)};
}

// Swizzle<3,4,3>: bits 7-9 of the byte address XOR-ed into bits 4-6.
uint32_t swizzle128(uint32_t address) { return address ^ ((address >> 3) & 0x70); }

// Where the kernel's copies put value (row, col) of a tile of `rows` rows.
uint32_t stored_at(int rows, int row, int col) {
  return kTileBase + 2 * static_cast<uint32_t>(panel_offset(rows, row, col / 8) + col % 8);
}

// K-major operand (Q or K): value (mn, k) of k-step kc, mn < 64, k < 16.
uint32_t read_k_major(const Fields& f, int mn, int k) {
  const int elems = (mn % 8) * 8 * kT + (k % 8) + (k / 8) * kT;
  return swizzle128(f.start + 2 * elems + (mn / 8) * f.stride);
}

// MN-major operand (V): value (k, n) of a k-step, k < 16 keys, n < D.
uint32_t read_mn_major(const Fields& f, int k, int n) {
  const int elems = (n % kT) + ((n / kT) % 8) * kT + (k % 8) * 8 * kT;
  return swizzle128(f.start + 2 * elems + (n / 64) * f.leading + (k / 8) * f.stride);
}

TEST(WgmmaLayout, PanelsPutChunksWhereTheSwizzleReadsThem) {
  // A row's chunk c sits at c ^ (row % 8) of its 128-byte panel row; panels are rows x 128 bytes apart.
  EXPECT_EQ(panel_offset(64, 0, 0), 0);
  EXPECT_EQ(panel_offset(64, 1, 0), 64 + 8);
  EXPECT_EQ(panel_offset(64, 9, 3), 9 * 64 + ((3 ^ 1) << 3));
  EXPECT_EQ(panel_offset(64, 5, 8), 64 * 64 + 5 * 64 + (5 << 3));
}

// Q tiles of 64 rows and K tiles of 64 or 128 keys (the N of S = Q K^T).
TEST(WgmmaLayout, KMajorDescriptorsReadTheStoredQAndKTiles) {
  for (const int rows : {64, 128}) {
    for (const int d : {64, 128}) {
      for (int kc = 0; kc < d / 16; ++kc) {
        const Fields f = decode(k_major_descriptor(kTileBase, rows, kc));
        ASSERT_EQ(f.swizzle, 1) << "128-byte swizzle";
        int mismatches = 0;
        for (int mn = 0; mn < rows; ++mn) {
          for (int k = 0; k < 16; ++k) mismatches += read_k_major(f, mn, k) != stored_at(rows, mn, 16 * kc + k);
        }
        EXPECT_EQ(mismatches, 0) << rows << " rows, d " << d << " k-step " << kc;
      }
    }
  }
}

// V tiles of 64 or 128 keys (the K of O += P V).
TEST(WgmmaLayout, MnMajorDescriptorsReadTheStoredVTile) {
  for (const int rows : {64, 128}) {
    for (const int d : {64, 128}) {
      for (int kk = 0; kk < rows / 16; ++kk) {
        const Fields f = decode(mn_major_descriptor(kTileBase, rows, kk));
        ASSERT_EQ(f.swizzle, 1) << "128-byte swizzle";
        int mismatches = 0;
        for (int k = 0; k < 16; ++k) {
          for (int n = 0; n < d; ++n) mismatches += read_mn_major(f, k, n) != stored_at(rows, 16 * kk + k, n);
        }
        EXPECT_EQ(mismatches, 0) << rows << " rows, d " << d << " k-step " << kk;
      }
    }
  }
}

// A TMA box of 64 rows x 64 values stored with the 128-byte swizzle (Swizzle<3,4,3> on the byte address, the box
// written row after row of 128 bytes) lands where the cp.async copies put the same values, when it starts at
// panel_offset of its first row and chunk, as the warp-specialised kernel's boxes do.
TEST(WgmmaLayout, TmaBoxesLandInThePanels) {
  for (const int rows : {64, 128}) {
    for (int row0 = 0; row0 < rows; row0 += 64) {
      for (const int chunk0 : {0, 8}) {
        const uint32_t box = kTileBase + 2 * static_cast<uint32_t>(panel_offset(rows, row0, chunk0));
        ASSERT_EQ(box % 1024, 0u) << "a box starts on a swizzle atom";
        int mismatches = 0;
        for (int r = 0; r < 64; ++r) {
          for (int v = 0; v < 64; ++v) {
            mismatches += swizzle128(box + 128 * r + 2 * v) != stored_at(rows, row0 + r, 8 * chunk0 + v);
          }
        }
        EXPECT_EQ(mismatches, 0) << rows << " rows, box at row " << row0 << ", chunk " << chunk0;
      }
    }
  }
}

// The FP8-products kernel's V tiles: fp8_pv_key_at permutes the keys within each 16, and MMA k index 4t + i of the
// E4M3 A fragment (lane 4g + t, register i / 4's byte i % 4, per 16 keys) holds the key the thread's S accumulators
// give it: n-tile 2 * (i / 2) + ..., column 2t + i % 2, i.e. key 8 * (i / 2) + 2t + i % 2.
TEST(WgmmaLayout, Fp8VTileKeyOrderMatchesTheAccumulators) {
  std::vector<int> seen(kFp8TileKeys, 0);
  for (int k = 0; k < kFp8TileKeys; ++k) {
    const int key = fp8_pv_key_at(k);
    ASSERT_GE(key, k / 16 * 16);
    ASSERT_LT(key, k / 16 * 16 + 16) << "a key leaves its 16";
    ++seen[static_cast<size_t>(key)];
    const int t = (k % 16) / 4, i = k % 4;
    EXPECT_EQ(key % 16, 8 * (i / 2) + 2 * t + i % 2) << "k " << k;
  }
  for (int key = 0; key < kFp8TileKeys; ++key) EXPECT_EQ(seen[static_cast<size_t>(key)], 1) << "key " << key;
  EXPECT_NE(fp8_pv_key_at(2), 2);  // not the identity
}

// The layouts must not be trivially equal: moving a k-step reads other values, and a box without the swizzle
// lands elsewhere.
TEST(WgmmaLayout, AWrongStepReadsOtherValues) {
  const uint32_t box = kTileBase + 2 * static_cast<uint32_t>(panel_offset(128, 0, 8));
  EXPECT_NE(box + 128 * 3, stored_at(128, 3, 64));
  const Fields f = decode(k_major_descriptor(kTileBase, 64, 1));
  EXPECT_NE(read_k_major(f, 3, 0), stored_at(64, 3, 0));
  const Fields v = decode(mn_major_descriptor(kTileBase, 64, 1));
  EXPECT_NE(read_mn_major(v, 0, 5), stored_at(64, 0, 5));
}

}  // namespace
}  // namespace nanovllm::cuda::attention_detail
