#pragma once
// Numbers read from outside (JSON fields, headers) are checked before they are narrowed: an id of
// 4294967301 must be refused, not wrapped to 5, and 1e300 must not become an infinite float.
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm {

// value as T when it is a JSON integer in [lo, hi]; otherwise InvalidInput "field 'name' must be an integer
// in [lo, hi], got <value>".
template <std::integral T, class Json>
T checked_integer(const Json& value, std::string_view name, T lo = std::numeric_limits<T>::min(),
                  T hi = std::numeric_limits<T>::max()) {
  const auto within = [&](auto v) { return std::cmp_greater_equal(v, lo) && std::cmp_less_equal(v, hi); };
  const bool in_range = value.is_number_unsigned()  ? within(value.template get<uint64_t>())
                        : value.is_number_integer() ? within(value.template get<int64_t>())
                                                    : false;
  if (!in_range)
    throw InvalidInput("field '" + std::string(name) + "' must be an integer in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "], got " + quoted_json(value));
  return value.template get<T>();
}

// value as T (float or double) when it is a JSON number that stays finite as T; otherwise InvalidInput
// naming the field (1e300 is finite as a double but not as a float).
// A seed: any 64-bit pattern, so an integer in [INT64_MIN, UINT64_MAX]; a negative one wraps, as in vLLM.
template <class Json>
uint64_t checked_seed(const Json& value, std::string_view name) {
  return value.is_number_unsigned() ? value.template get<uint64_t>()
                                    : static_cast<uint64_t>(checked_integer<int64_t>(value, name));
}

template <std::floating_point T, class Json>
T checked_finite(const Json& value, std::string_view name) {
  if (!value.is_number())
    throw InvalidInput("field '" + std::string(name) + "' must be a number, got " + quoted_json(value));
  const T v = static_cast<T>(value.template get<double>());
  if (!std::isfinite(v))
    throw InvalidInput("field '" + std::string(name) + "' must be a finite number, got " + quoted_json(value));
  return v;
}

// a * b, or false when the product does not fit in uint64_t.
inline bool multiply_fits(uint64_t a, uint64_t b, uint64_t& product) { return !__builtin_mul_overflow(a, b, &product); }

}  // namespace nanovllm
