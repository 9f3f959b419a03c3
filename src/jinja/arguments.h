#pragma once
// Reading the arguments of built-ins (filters, tests, methods, global functions). Errors name the built-in.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace nanovllm::jinja {

// Argument `name` (keyword) or at `index` (positional); an Error when missing.
const Value& arg(const CallArgs& a, size_t index, std::string_view name, const char* what);
const std::string& string_arg(const CallArgs& a, size_t index, std::string_view name, const char* what);
const std::string& need_string(const Value& v, const char* what);
// An optional string: nullptr when absent, none or undefined; an Error for another type.
const std::string* optional_string(const Value* v, const char* what);
// An integer when given one, else the fallback.
int64_t int_or(const Value* v, int64_t fallback);
// The positional arguments from `from` on (map('upper') passes the rest to the filter it names).
CallArgs rest_args(const CallArgs& a, size_t from);

}  // namespace nanovllm::jinja
