#pragma once
// Jinja's tests: `value is name`, `value is name(other)`, and the test names select/reject take.
#include <string>

#include "jinja/value.h"

namespace nanovllm::jinja {

bool has_test(const std::string& name);
// Throws Error for a test outside the subset or a missing argument.
bool apply_test(const std::string& name, const Value& value, const CallArgs& args);

}  // namespace nanovllm::jinja
