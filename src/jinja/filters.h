#pragma once
// Jinja's filters (value | name(args)) that chat templates use, with Jinja's and Python's semantics.
#include <string>

#include "jinja/value.h"

namespace nanovllm::jinja {

bool has_filter(const std::string& name);
// Throws Error for a filter outside the subset.
Value apply_filter(const std::string& name, const Value& value, const CallArgs& args);

}  // namespace nanovllm::jinja
