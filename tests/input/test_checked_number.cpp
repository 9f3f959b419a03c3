#include <gtest/gtest.h>

#include <cstdint>

#include "common/checked_number.h"
#include "common/host_memory.h"
#include "support/expect_invalid.h"

namespace nanovllm {
namespace {

using nlohmann::json;
using testing::expect_invalid;

TEST(CheckedInteger, RefusesWhatWouldWrap) {
  EXPECT_EQ(checked_integer<int>(json::parse("2147483647"), "max_tokens"), 2147483647);
  expect_invalid([] { checked_integer<int>(json::parse("4294967299"), "max_tokens"); },
                 {"field 'max_tokens' must be an integer in [-2147483648, 2147483647], got 4294967299"});
  expect_invalid([] { checked_integer<int>(json::parse("2147483648"), "max_tokens"); }, {"got 2147483648"});
  expect_invalid([] { checked_integer<int32_t>(json::parse("4294967301"), "id", 0); }, {"'id'", "[0, 2147483647]"});
  expect_invalid([] { checked_integer<int32_t>(json::parse("-1"), "id", 0); }, {"got -1"});
  expect_invalid([] { checked_integer<int>(json::parse("18446744073709551615"), "n"); }, {"got 18446744073709551615"});
  EXPECT_EQ(checked_integer<uint64_t>(json::parse("18446744073709551615"), "n"), UINT64_MAX);
  expect_invalid([] { checked_integer<int>(json::parse("1.5"), "n"); }, {"must be an integer", "got 1.5"});
  expect_invalid([] { checked_integer<int>(json::parse("\"3\""), "n"); }, {"got \"3\""});
  EXPECT_EQ(checked_integer<int>(json::parse("-5"), "n", -5, 5), -5);
  expect_invalid([] { checked_integer<int>(json::parse("6"), "n", -5, 5); }, {"[-5, 5]"});
}

TEST(CheckedFinite, RefusesWhatIsInfiniteInTheTargetType) {
  EXPECT_FLOAT_EQ(checked_finite<float>(json::parse("0.5"), "temperature"), 0.5f);
  expect_invalid([] { checked_finite<float>(json::parse("1e300"), "rms_norm_eps"); },
                 {"field 'rms_norm_eps' must be a finite number"});
  EXPECT_DOUBLE_EQ(checked_finite<double>(json::parse("1e300"), "rope_theta"), 1e300);
  expect_invalid([] { checked_finite<double>(json::parse("null"), "x"); }, {"must be a number, got null"});
}

TEST(CheckedProduct, DetectsOverflow) {
  uint64_t product = 0;
  EXPECT_TRUE(multiply_fits(1ull << 31, 1ull << 32, product));
  EXPECT_EQ(product, 1ull << 63);
  EXPECT_FALSE(multiply_fits(1ull << 32, 1ull << 32, product));
}

TEST(HostMemory, RefusesMoreThanThereIs) {
  EXPECT_GT(available_host_memory_bytes(), 0u);
  EXPECT_NO_THROW(require_host_memory(1 << 20, "a small table"));
  expect_invalid([] { require_host_memory(1ull << 60, "the rope table for max_model_len 2147483647"); },
                 {"the rope table for max_model_len 2147483647 needs 1073741824.0 GiB of memory, but only"});
}

}  // namespace
}  // namespace nanovllm
