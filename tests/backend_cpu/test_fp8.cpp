// The FP8 E4M3 conversions against the format's definition: every code decodes to the value its bits
// define, and the encoder picks the nearest code (ties to the even code, saturating at +-448), checked by
// a search over all codes for values that include every midpoint between neighbours.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/fp8.h"
#include "common/fp8_activation.h"

namespace nanovllm {
namespace {

// The finite non-negative codes in increasing order of value: 0x00 .. 0x7e.
std::vector<uint8_t> positive_codes() {
  std::vector<uint8_t> codes;
  for (int c = 0; c <= 0x7e; ++c) codes.push_back(static_cast<uint8_t>(c));
  return codes;
}

// Nearest finite code by exhaustive search; equal distance goes to the code with an even mantissa.
uint8_t nearest_code(float x) {
  const float a = std::fabs(x);
  uint8_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (uint8_t c : positive_codes()) {
    const double distance = std::fabs(static_cast<double>(fp8_e4m3_to_float(c)) - a);
    if (distance < best_distance || (distance == best_distance && (c & 1) == 0)) {
      best = c;
      best_distance = distance;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8E4m3, DecodesEveryCodeByItsBits) {
  EXPECT_EQ(fp8_e4m3_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_float(0x80)));
  EXPECT_EQ(fp8_e4m3_to_float(0x01), 0x1p-9f);  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(fp8_e4m3_to_float(0x08), 0x1p-6f);  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x3c), 1.5f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xff)));
  // Strictly increasing over the finite positive codes: the search below relies on it.
  for (int c = 1; c <= 0x7e; ++c)
    EXPECT_LT(fp8_e4m3_to_float(static_cast<uint8_t>(c - 1)), fp8_e4m3_to_float(static_cast<uint8_t>(c))) << c;
}

TEST(Fp8E4m3, TheValueTableDecodesEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const float want = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    const float got = fp8_e4m3_values()[static_cast<size_t>(c)];
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << c;  // -0 stays -0
    }
  }
}

TEST(Fp8E4m3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(float_to_fp8_e4m3(fp8_e4m3_to_float(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(Fp8E4m3, RoundsToNearestEvenAtEveryMidpoint) {
  std::vector<float> values;
  for (int c = 1; c <= 0x7e; ++c) {
    const float lo = fp8_e4m3_to_float(static_cast<uint8_t>(c - 1));
    const float hi = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    const float mid = (lo + hi) / 2;  // exact: both have few significant bits
    values.insert(values.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)});
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> log_magnitude(-12.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) values.push_back(std::exp2(log_magnitude(rng)));
  for (float v : values) {
    for (float x : {v, -v}) EXPECT_EQ(float_to_fp8_e4m3(x), nearest_code(x)) << x;
  }
}

// The encoder works on the fp32 bits; a sweep of the bit patterns from 0 to past 512 (every 1009th, so every
// binade and the subnormal range are crossed at many offsets), both signs, against the search.
TEST(Fp8E4m3, MatchesTheSearchAcrossTheBitPatterns) {
  for (uint32_t bits = 0; bits < 0x44000000u; bits += 1009) {
    const float v = std::bit_cast<float>(bits);
    for (float x : {v, -v}) ASSERT_EQ(float_to_fp8_e4m3(x), nearest_code(x)) << x << " (bits " << bits << ")";
  }
}

TEST(Fp8E4m3, SaturatesAndKeepsNan) {
  for (float x : {448.0f, 463.9f, 464.0f, 1e6f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(float_to_fp8_e4m3(x), 0x7e) << x;
    EXPECT_EQ(float_to_fp8_e4m3(-x), 0xfe) << x;
  }
  EXPECT_EQ(float_to_fp8_e4m3(std::nanf("")), 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3(1e-30f), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(float_to_fp8_e4m3(-1e-30f), 0x80);
}

// The activations' per-token, per-128-group rule (the reference the CUDA quantiser is checked against): each
// group's largest magnitude becomes the code 448 exactly, a group of zeros gets scale 1 and zero codes, a last
// group shorter than 128 takes its scale from its own values, and code * scale is within E4M3's rounding.
TEST(Fp8Activations, QuantisesEachTokenGroupByItsAmax) {
  const int64_t rows = 2, cols = 128 + 48;  // two groups a row, the second partial
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (auto& v : x) v = dist(rng);
  x[5] = -7.5f;    // row 0, group 0's amax (negative)
  x[130] = 0.25f;  // row 0, group 1's amax
  for (int64_t c = 131; c < cols; ++c) x[static_cast<size_t>(c)] = 0.0625f;
  x[128] = 0.0f;
  x[129] = -0.125f;
  for (int64_t c = 0; c < 128; ++c) x[static_cast<size_t>(cols + c)] = 0.0f;  // row 1, group 0: zeros
  std::vector<uint8_t> codes(x.size());
  std::vector<float> scales(static_cast<size_t>(rows * 2));
  quantize_fp8_activations(x.data(), rows, cols, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 7.5f / 448.0f);
  EXPECT_EQ(codes[5], float_to_fp8_e4m3(-448.0f));
  EXPECT_EQ(scales[1], 0.25f / 448.0f);
  EXPECT_EQ(codes[130], 0x7e);
  EXPECT_EQ(scales[2], 1.0f);
  for (int64_t c = 0; c < 128; ++c) EXPECT_EQ(codes[static_cast<size_t>(cols + c)], 0);
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / cols, g = (static_cast<int64_t>(i) % cols) / 128;
    const float scale = scales[static_cast<size_t>(r * 2 + g)];
    const float back = fp8_e4m3_to_float(codes[i]) * scale;
    EXPECT_EQ(codes[i], float_to_fp8_e4m3(x[i] / scale)) << i;
    EXPECT_LE(std::fabs(back - x[i]), std::fabs(x[i]) / 16 + 0x1p-10f * scale) << i;
  }
}

}  // namespace
}  // namespace nanovllm
