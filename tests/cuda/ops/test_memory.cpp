// Device memory, copies and conversions of CudaBackend.
#include "tests/cuda/ops/ops_test_support.h"
#include "tests/support/upload_ranges_case.h"

namespace nanovllm::test {
namespace {

TEST_F(CudaOpsTest, NameAndDtype) {
  EXPECT_EQ(gpu().name().rfind("cuda:", 0), 0u) << gpu().name();
  EXPECT_EQ(gpu().compute_dtype(), DType::BF16);
  // What the engine reads through the Backend interface.
  const Backend& backend = gpu();
  EXPECT_TRUE(backend.is_device());
  EXPECT_EQ(backend.name(), "cuda:" + backend.device_name());
  const auto info = backend.memory_info();
  EXPECT_GT(info.total_bytes, 0u);
  EXPECT_LE(info.free_bytes, info.total_bytes);
}

TEST_F(CudaOpsTest, BytesAllocatedTracksLiveBuffers) {
  const size_t before = gpu().bytes_allocated();
  {
    Buffer a = gpu().allocate(1000);
    Buffer b = gpu().allocate(1 << 20);
    EXPECT_EQ(gpu().bytes_allocated(), before + 1000 + (1 << 20));
  }
  EXPECT_EQ(gpu().bytes_allocated(), before);
}

TEST_F(CudaOpsTest, UploadConvertedMatchesHostRounding) {
  // Crosses the 4 Mi-element staging chunk twice, so the double-buffered path is exercised.
  const int64_t n = 9'000'001;
  std::vector<float> f32(static_cast<size_t>(n));
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  for (auto& x : f32) x = dist(rng_);
  std::vector<uint16_t> f16(static_cast<size_t>(n));
  std::vector<uint16_t> bf16(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // A valid f16 bit pattern (finite: exponent < 31) for each element.
    f16[i] = static_cast<uint16_t>((rng_() & 0x83FFu) | ((rng_() % 31) << 10));
    bf16[i] = float_to_bf16(f32[i] * 0.5f);
  }
  for (DType src : {DType::F32, DType::F16, DType::BF16}) {
    Tensor dst = gpu_empty(DType::BF16, {n});
    const void* host = src == DType::F32   ? static_cast<const void*>(f32.data())
                       : src == DType::F16 ? static_cast<const void*>(f16.data())
                                           : static_cast<const void*>(bf16.data());
    gpu().upload_converted(host, src, dst.data, n);
    std::vector<uint16_t> got(static_cast<size_t>(n));
    gpu().download(dst.data, got.data(), dst.bytes());
    int64_t mismatches = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = src == DType::F32   ? float_to_bf16(f32[i])
                            : src == DType::F16 ? float_to_bf16(f16_to_float(f16[i]))
                                                : bf16[i];
      if (got[i] != want && mismatches++ == 0) first = i;
    }
    EXPECT_EQ(mismatches, 0) << dtype_name(src) << ": first mismatch at " << first;
  }
}

TEST_F(CudaOpsTest, PinnedAsyncRoundTrip) {
  const size_t bytes = 3 << 20;
  Buffer src = gpu().allocate_host(bytes);
  Buffer back = gpu().allocate_host(bytes);
  auto* s = static_cast<uint8_t*>(src.data());
  for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<uint8_t>(i * 131 + 7);
  std::memset(back.data(), 0, bytes);
  Buffer dev = gpu().allocate(bytes);
  gpu().upload_async(src.data(), dev.data(), bytes);
  gpu().download_async(dev.data(), back.data(), bytes);
  gpu().synchronize();
  EXPECT_EQ(std::memcmp(src.data(), back.data(), bytes), 0);
}

// One kernel reads the pinned area: only the ranges reach the destination (a 200 KiB one over several blocks, word
// tails after the 16-byte loads), and negative words of the id range become rows of a device buffer.
TEST_F(CudaOpsTest, UploadRangesCopiesTheRangesAndTakesDeviceIds) {
  const UploadRangesCase c;
  Buffer ids = gpu().allocate(c.device_ids.size() * 4);
  gpu().upload(c.device_ids.data(), ids.data(), c.device_ids.size() * 4);
  const std::vector<uint8_t> sentinel(c.kBytes, c.kSentinel);
  for (bool with_ids : {false, true}) {
    Buffer host = gpu().allocate_host(c.kBytes);
    std::memcpy(host.data(), c.host.data(), c.kBytes);
    Buffer dst = gpu().allocate(c.kBytes);
    gpu().upload(sentinel.data(), dst.data(), c.kBytes);
    gpu().upload_ranges(host.data(), dst.data(), c.ranges,
                        {0, with_ids ? static_cast<const int32_t*>(ids.data()) : nullptr});
    std::vector<uint8_t> got(c.kBytes);
    gpu().download(dst.data(), got.data(), c.kBytes);
    const std::vector<uint8_t> expected = c.expected(with_ids);
    size_t first_bad = 0;
    while (first_bad < c.kBytes && got[first_bad] == expected[first_bad]) ++first_bad;
    EXPECT_EQ(first_bad, c.kBytes) << "with ids " << with_ids << ": first differing byte";
  }
}

TEST_F(CudaOpsTest, ReadBandwidthIsPlausible) {
  const double gbs = gpu().measure_read_bandwidth_gbs(size_t{1} << 30);
  std::printf("read bandwidth on %s: %.0f GB/s\n", gpu().device_name().c_str(), gbs);
  EXPECT_GT(gbs, 200.0);
  EXPECT_LT(gbs, 20000.0);
}

}  // namespace
}  // namespace nanovllm::test
