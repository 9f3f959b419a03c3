#pragma once
// Thin inline-PTX wrappers for Hopper's warpgroup MMA (wgmma, sm_90a only): shared-memory matrix descriptors
// for 128-byte-swizzled bf16 tiles, the fences around an asynchronous MMA, the shapes the prefill kernels and the
// skinny GEMM issue, mbarriers and TMA copies. Every wrapper compiles to nothing outside sm_90a; callers only
// launch on sm_90a.
//
// Tile layout in shared memory (what the descriptors below describe): a tile of R rows x D bf16 is stored as
// D / 64 column panels of [R rows][64 values]; a panel's row is 128 bytes, made of eight 16-byte chunks, and
// chunk c of row r sits at position c ^ (r % 8) (the hardware's 128-byte swizzle, applied to address bits 4-6
// from bits 7-9, so every panel starts on a 1024-byte boundary).
//
// Accumulator layout (m64nNk16, fp32), warp w of the warpgroup, lane = 4 * g + t: register 4 * j + e holds
// row 16 * w + g + 8 * (e / 2), column 8 * j + 2 * t + (e % 2): per warp, exactly mma.sync m16n8's C fragments
// of n-tiles j = 0 .. N / 8 - 1. An A operand from registers takes mma.sync m16n8k16's A fragment.
#include <cuda_runtime.h>

#include <cstdint>

namespace nanovllm::cuda::attention_detail {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NANOVLLM_WGMMA 1
#endif

constexpr int kPanelValues = 64;    // bf16 values in one 128-byte panel row
constexpr int kSwizzleAtom = 1024;  // bytes: 8 rows of 128 bytes

// Element offset of chunk `chunk` (16 bytes, 0 .. D / 8 - 1) of row r in a tile of `rows` rows.
__host__ __device__ constexpr int panel_offset(int rows, int r, int chunk) {
  return (chunk >> 3) * rows * kPanelValues + r * kPanelValues + (((chunk & 7) ^ (r & 7)) << 3);
}

// Byte offset of 16-byte chunk `chunk` (0 .. 7) of row r in a tile of 128-byte rows (8-bit operands: 128 values a
// row, so the tile is one panel).
__host__ __device__ constexpr int swizzled_byte_offset(int r, int chunk) { return r * 128 + ((chunk ^ (r & 7)) << 4); }

// Descriptor of a 128-byte-swizzled operand starting at shared address `addr` (a multiple of 16; the panel it
// lies in starts on a 1024-byte boundary). leading / stride: byte offsets the PTX ISA defines per major-ness.
__host__ __device__ __forceinline__ uint64_t wgmma_descriptor(uint32_t addr, uint32_t leading, uint32_t stride) {
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) | static_cast<uint64_t>((leading >> 4) & 0x3fffu) << 16 |
         static_cast<uint64_t>((stride >> 4) & 0x3fffu) << 32 | 1ull << 62;  // 62-63 = 1: 128-byte swizzle
}

// K-major operand (rows are the M or N dimension, the 16 values of a k-step contiguous): k-step kc of a tile
// of `rows` rows. The stride is one swizzle atom (8 rows); with the 128-byte swizzle the hardware ignores the
// descriptor's other offset field (bits 16-29), so any value does there.
__host__ __device__ __forceinline__ uint64_t k_major_descriptor(uint32_t tile, int rows, int kc) {
  const uint32_t addr = tile + (kc >> 2) * rows * 128 + (kc & 3) * 32;
  return wgmma_descriptor(addr, 16, kSwizzleAtom);
}

// MN-major operand (rows are the K dimension, N contiguous): k-step kk (16 rows) of a tile of `rows` rows.
// Leading: from one 64-value panel of N to the next; stride: from one group of eight K rows to the next.
__host__ __device__ __forceinline__ uint64_t mn_major_descriptor(uint32_t tile, int rows, int kk) {
  return wgmma_descriptor(tile + kk * 16 * 128, rows * 128, kSwizzleAtom);
}

// Orders this thread's generic-proxy writes to shared memory (st.shared, cp.async) before the async proxy's
// reads (wgmma operands); a barrier after it makes every thread's writes visible.
__device__ __forceinline__ void fence_shared_for_wgmma() {
#ifdef NANOVLLM_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Before the first wgmma of a batch: orders earlier register writes (accumulators, A fragments) before it.
__device__ __forceinline__ void wgmma_fence() {
#ifdef NANOVLLM_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#ifdef NANOVLLM_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Waits until at most N committed groups are pending; their accumulators are then readable.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef NANOVLLM_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// The four accumulator registers of n-tile i, as read-write asm operands.
#define NANOVLLM_ACC_NTILE(i) "+f"(acc[i][0]), "+f"(acc[i][1]), "+f"(acc[i][2]), "+f"(acc[i][3])
// The m64n64 accumulators as the PTX register list %0 .. %31 (the asm operands above, n-tiles 0 .. 7).
#define NANOVLLM_ACC_LIST_32                                                \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define NANOVLLM_ACC_OPERANDS_32                                                                                     \
  NANOVLLM_ACC_NTILE(0), NANOVLLM_ACC_NTILE(1), NANOVLLM_ACC_NTILE(2), NANOVLLM_ACC_NTILE(3), NANOVLLM_ACC_NTILE(4), \
      NANOVLLM_ACC_NTILE(5), NANOVLLM_ACC_NTILE(6), NANOVLLM_ACC_NTILE(7)

// The m64n128 accumulators as the PTX register list %0 .. %63 and their asm operands (n-tiles 0 .. 15).
#define NANOVLLM_ACC_LIST_64                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define NANOVLLM_ACC_OPERANDS_64                                                                      \
  NANOVLLM_ACC_OPERANDS_32, NANOVLLM_ACC_NTILE(8), NANOVLLM_ACC_NTILE(9), NANOVLLM_ACC_NTILE(10),     \
      NANOVLLM_ACC_NTILE(11), NANOVLLM_ACC_NTILE(12), NANOVLLM_ACC_NTILE(13), NANOVLLM_ACC_NTILE(14), \
      NANOVLLM_ACC_NTILE(15)

// Keeps the compiler from moving accesses of a register the asynchronous MMA reads or writes (accumulators,
// A fragments) across its issue and wait.
__device__ __forceinline__ void wgmma_hold_register(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void wgmma_hold_register(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

template <typename T, int R, int C>
__device__ __forceinline__ void wgmma_hold(T (&regs)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int j = 0; j < C; ++j) wgmma_hold_register(regs[i][j]);
  }
}

// acc (64 x 64) = A (64 x 16, shared, K-major) * B (16 x 64, shared, K-major) + (accumulate ? acc : 0).
__device__ __forceinline__ void wgmma_64x64_ss(float (&acc)[8][4], uint64_t a, uint64_t b, bool accumulate) {
#ifdef NANOVLLM_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " NANOVLLM_ACC_LIST_32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : NANOVLLM_ACC_OPERANDS_32
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#endif
}

// acc (64 x 128) = A (64 x 16, shared, K-major) * B (16 x 128, shared, K-major) + (accumulate ? acc : 0).
__device__ __forceinline__ void wgmma_64x128_ss(float (&acc)[16][4], uint64_t a, uint64_t b, bool accumulate) {
#ifdef NANOVLLM_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " NANOVLLM_ACC_LIST_64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : NANOVLLM_ACC_OPERANDS_64
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#endif
}

// acc (64 x 64) += A (64 x 16, registers) * B (16 x 64, shared, MN-major).
__device__ __forceinline__ void wgmma_64x64_rs(float (&acc)[8][4], const uint32_t (&a)[4], uint64_t b) {
#ifdef NANOVLLM_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " NANOVLLM_ACC_LIST_32
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : NANOVLLM_ACC_OPERANDS_32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}

// acc (64 x 128) += A (64 x 16, registers) * B (16 x 128, shared, MN-major).
__device__ __forceinline__ void wgmma_64x128_rs(float (&acc)[16][4], const uint32_t (&a)[4], uint64_t b) {
#ifdef NANOVLLM_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " NANOVLLM_ACC_LIST_64
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : NANOVLLM_ACC_OPERANDS_64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}

// E4M3 operands: k-steps of 32 codes (32 bytes, as bf16's 16 values), both shared-memory operands K-major (the
// only form wgmma takes for 8-bit types). A from registers takes mma.sync m16n8k32's A fragment: lane 4g + t holds
// row g's k = 4t .. 4t + 3, row g + 8's, row g's k = 16 + 4t .. 16 + 4t + 3, row g + 8's, four codes a register,
// lowest k in the lowest byte.
// acc (64 x 128) = A (64 x 32, shared) * B (32 x 128, shared) + (accumulate ? acc : 0).
__device__ __forceinline__ void wgmma_64x128_ss_e4m3(float (&acc)[16][4], uint64_t a, uint64_t b, bool accumulate) {
#ifdef NANOVLLM_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " NANOVLLM_ACC_LIST_64 ", %64, %65, p, 1, 1;\n}\n"
      : NANOVLLM_ACC_OPERANDS_64
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#endif
}

// acc (64 x 128) += A (64 x 32, registers) * B (32 x 128, shared).
__device__ __forceinline__ void wgmma_64x128_rs_e4m3(float (&acc)[16][4], const uint32_t (&a)[4], uint64_t b) {
#ifdef NANOVLLM_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " NANOVLLM_ACC_LIST_64
      ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : NANOVLLM_ACC_OPERANDS_64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}

// The m64n32 accumulators (n-tiles 0 .. 3), as above.
#define NANOVLLM_ACC_LIST_16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define NANOVLLM_ACC_OPERANDS_16 \
  NANOVLLM_ACC_NTILE(0), NANOVLLM_ACC_NTILE(1), NANOVLLM_ACC_NTILE(2), NANOVLLM_ACC_NTILE(3)

// acc (64 x 32) = A (64 x 16, shared, K-major) * B (16 x 32, shared, K-major) + (accumulate ? acc : 0).
__device__ __forceinline__ void wgmma_64x32_ss(float (&acc)[4][4], uint64_t a, uint64_t b, bool accumulate) {
#ifdef NANOVLLM_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " NANOVLLM_ACC_LIST_16 ", %16, %17, p, 1, 1, 0, 0;\n}\n"
      : NANOVLLM_ACC_OPERANDS_16
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#endif
}

#undef NANOVLLM_ACC_OPERANDS_16
#undef NANOVLLM_ACC_LIST_16
#undef NANOVLLM_ACC_OPERANDS_64
#undef NANOVLLM_ACC_LIST_64
#undef NANOVLLM_ACC_OPERANDS_32
#undef NANOVLLM_ACC_LIST_32
#undef NANOVLLM_ACC_NTILE

// mbarrier (shared memory, 8 bytes): a phase completes when `count` arrivals have happened; waiters name the
// phase by its parity.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
#ifdef NANOVLLM_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}

// Release: this thread's earlier memory operations are visible to whoever waits for the phase.
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
#ifdef NANOVLLM_WGMMA
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.release.cta.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
#endif
}

// Acquire: returns once the phase of this parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
#ifdef NANOVLLM_WGMMA
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}

// Hands registers between warpgroups (all of a warpgroup's threads execute it): fewer for a copying
// warpgroup, more for computing ones.
template <int N>
__device__ __forceinline__ void warpgroup_registers_down() {
#ifdef NANOVLLM_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void warpgroup_registers_up() {
#ifdef NANOVLLM_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

// Arrives on `bar` and tells it `bytes` more will land through the async proxy before its phase completes.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#ifdef NANOVLLM_WGMMA
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}

// One TMA box of a 3-D tensor map into shared memory at dst, completing `bytes` of bar's transaction count.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, int c0, int c1, int c2, uint32_t bar) {
#ifdef NANOVLLM_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
#endif
}

// One TMA box of a 2-D tensor map into shared memory at dst, completing `bytes` of bar's transaction count.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int c0, int c1, uint32_t bar) {
#ifdef NANOVLLM_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#endif
}

// A contiguous copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into shared
// memory at dst through the async proxy, completing `bytes` of bar's transaction count.
__device__ __forceinline__ void bulk_copy_to_shared(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#ifdef NANOVLLM_WGMMA
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

}  // namespace nanovllm::cuda::attention_detail
