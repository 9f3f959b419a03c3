// Memory, transfers, dtype conversion and the row-copy ops (embedding, gather_rows).
#include <bit>
#include <cstdint>
#include <cstring>

#include "common/half_float.h"
#include "test_helpers.h"
#include "tests/support/upload_ranges_case.h"

namespace nanovllm {
namespace {

using test::make_tensor;
using test::poisoned_f32;
using test::random_f32;

TEST(CpuBackendMemory, NameAndComputeDtype) {
  CpuBackend backend;
  EXPECT_EQ(backend.name(), "cpu");
  EXPECT_EQ(backend.compute_dtype(), DType::F32);
  EXPECT_GE(backend.num_threads(), 1);
  EXPECT_EQ(CpuBackend(3).num_threads(), 3);
}

// Only the ranges reach the destination, negative words of the id range become the device ids' rows, and bad
// ranges are refused with what is wrong.
TEST(CpuBackendMemory, UploadRangesCopiesTheRangesAndTakesDeviceIds) {
  CpuBackend backend;
  const test::UploadRangesCase c;
  for (bool with_ids : {false, true}) {
    Buffer host = backend.allocate_host(c.kBytes);
    std::memcpy(host.data(), c.host.data(), c.kBytes);
    Buffer dst = backend.allocate(c.kBytes);
    std::memset(dst.data(), c.kSentinel, c.kBytes);
    backend.upload_ranges(host.data(), dst.data(), c.ranges, {0, with_ids ? c.device_ids.data() : nullptr});
    const std::vector<uint8_t> expected = c.expected(with_ids);
    EXPECT_EQ(std::memcmp(dst.data(), expected.data(), c.kBytes), 0) << "with ids " << with_ids;
  }
  Buffer host = backend.allocate_host(4096), dst = backend.allocate(4096);
  auto refused = [&](const std::vector<CopyRange>& ranges, const DeviceIdSource& from, const std::string& what) {
    try {
      backend.upload_ranges(host.data(), dst.data(), ranges, from);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const EngineError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused(std::vector<CopyRange>(17, {0, 4}), {}, "17 ranges, at most 16");
  refused({{8, 4}}, {}, "range at 8 of 4 bytes is not 16-byte aligned");
  refused({{16, 6}}, {}, "range at 16 of 6 bytes");
  const int32_t ids[1] = {1};
  refused({{0, 4}}, {1, ids}, "device ids for range 1 of 1");
}

TEST(CpuBackendMemory, AllocateIsAlignedAndWritable) {
  CpuBackend backend;
  for (size_t bytes : {size_t{1}, size_t{3}, size_t{64}, size_t{1000}, size_t{1} << 20}) {
    Buffer b = backend.allocate(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.bytes(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    std::memset(b.data(), 0xab, bytes);
  }
  EXPECT_EQ(backend.allocate(0).bytes(), 0u);
}

TEST(CpuBackendMemory, UploadDownloadRoundTrip) {
  CpuBackend backend;
  std::vector<uint8_t> host(777);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 31 + 7);
  Buffer b = backend.allocate(host.size());
  backend.upload(host.data(), b.data(), host.size());
  std::vector<uint8_t> back(host.size());
  backend.download(b.data(), back.data(), back.size());
  backend.synchronize();
  EXPECT_EQ(host, back);
}

TEST(CpuBackendMemory, UploadConvertedFromEachFloatFormat) {
  CpuBackend backend;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  const int64_t n = 100003;  // past the parallel threshold, odd
  std::vector<float> f32(n);
  std::vector<uint16_t> bf16(n);
  for (int64_t i = 0; i < n; ++i) {
    f32[i] = dist(rng);
    bf16[i] = float_to_bf16(f32[i]);
  }
  Buffer out = backend.allocate(n * 4);
  backend.upload_converted(f32.data(), DType::F32, out.data(), n);
  // Bit patterns, not values: the copy must be exact.
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(static_cast<float*>(out.data())[i]), std::bit_cast<uint32_t>(f32[i])) << i;
  backend.upload_converted(bf16.data(), DType::BF16, out.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(static_cast<float*>(out.data())[i], bf16_to_float(bf16[i])) << i;

  // F16 bit patterns with known values: 1, -2, 0.5, 65504 (max), 2^-24 (smallest subnormal), -0, +inf.
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8000, 0x7C00};
  const std::vector<float> want = {
      1.0f, -2.0f, 0.5f, 65504.0f, std::ldexp(1.0f, -24), -0.0f, std::numeric_limits<float>::infinity()};
  Buffer small = backend.allocate(f16.size() * 4);
  backend.upload_converted(f16.data(), DType::F16, small.data(), static_cast<int64_t>(f16.size()));
  for (size_t i = 0; i < f16.size(); ++i) EXPECT_EQ(static_cast<float*>(small.data())[i], want[i]) << i;
  EXPECT_TRUE(std::signbit(static_cast<float*>(small.data())[5]));

  EXPECT_THROW(backend.upload_converted(f16.data(), DType::I32, small.data(), 1), EngineError);
}

TEST(CpuBackendRows, EmbeddingCopiesTheIndexedRows) {
  CpuBackend backend;
  std::mt19937 rng(2);
  const int64_t vocab = 97, hidden = 48;
  auto table = random_f32(backend, {vocab, hidden}, rng);
  for (std::vector<int32_t> ids :
       {std::vector<int32_t>{5}, {0, 96, 5}, {3, 3, 1, 95, 0, 17, 44, 96, 2, 8, 9, 10, 11, 12, 13, 14, 15}}) {
    auto id_t = test::i32_tensor(backend, ids);
    const int64_t t = static_cast<int64_t>(ids.size());
    auto out = poisoned_f32(backend, {t, hidden});
    backend.embedding(id_t.tensor, table.tensor, 0, out.tensor);
    for (int64_t r = 0; r < t; ++r)
      for (int64_t c = 0; c < hidden; ++c)
        ASSERT_EQ(out.f32()[r * hidden + c], table.f32()[ids[r] * hidden + c]) << r << "," << c;
  }
}

// A vocabulary-parallel rank holds rows [start, start + 97) of a larger vocabulary: its own ids are copied,
// every other id (below, at the far edge, above) gives a zero row.
TEST(CpuBackendRows, EmbeddingShardZeroesOtherRanksIds) {
  CpuBackend backend;
  std::mt19937 rng(3);
  const int64_t rows = 97, hidden = 40, start = 200;
  auto table = random_f32(backend, {rows, hidden}, rng);
  const std::vector<int32_t> ids = {200, 5, 296, 297, 199, 250, 1000, 201};
  auto id_t = test::i32_tensor(backend, ids);
  const int64_t t = static_cast<int64_t>(ids.size());
  auto out = poisoned_f32(backend, {t, hidden});
  backend.embedding(id_t.tensor, table.tensor, start, out.tensor);
  for (int64_t r = 0; r < t; ++r) {
    const bool mine = ids[r] >= start && ids[r] < start + rows;
    for (int64_t c = 0; c < hidden; ++c)
      ASSERT_EQ(out.f32()[r * hidden + c], mine ? table.f32()[(ids[r] - start) * hidden + c] : 0.0f)
          << "id " << ids[r] << " col " << c;
  }
}

// Chunks of C = 5 columns from 3 ranks joined into 13 columns: the last chunk's padding column is dropped.
TEST(CpuBackendRows, ConcatColumnChunksJoinsRanksSlices) {
  CpuBackend backend;
  std::mt19937 rng(4);
  const int64_t P = 3, R = 7, C = 5, N = 13;
  auto parts = random_f32(backend, {P, R, C}, rng);
  auto out = poisoned_f32(backend, {R, N});
  backend.concat_column_chunks(parts.tensor, out.tensor);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t n = 0; n < N; ++n)
      ASSERT_EQ(out.f32()[r * N + n], parts.f32()[((n / C) * R + r) * C + n % C]) << r << "," << n;
  auto too_wide = poisoned_f32(backend, {R, P * C + 1});
  EXPECT_THROW(backend.concat_column_chunks(parts.tensor, too_wide.tensor), EngineError);
}

TEST(CpuBackendRows, GatherRowsPicksRowsInOrder) {
  CpuBackend backend;
  std::mt19937 rng(3);
  const int64_t tokens = 33, hidden = 96;
  auto x = random_f32(backend, {tokens, hidden}, rng);
  const std::vector<int32_t> rows = {32, 0, 16, 16, 5};
  auto rows_t = test::i32_tensor(backend, rows);
  auto out = poisoned_f32(backend, {5, hidden});
  backend.gather_rows(x.tensor, rows_t.tensor, out.tensor);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < hidden; ++c) ASSERT_EQ(out.f32()[r * hidden + c], x.f32()[rows[r] * hidden + c]);
  auto wrong_shape = poisoned_f32(backend, {4, hidden});
  EXPECT_THROW(backend.gather_rows(x.tensor, rows_t.tensor, wrong_shape.tensor), EngineError);
}

}  // namespace
}  // namespace nanovllm
