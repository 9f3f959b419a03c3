#pragma once
// The global functions templates may call: namespace, range, raise_exception, strftime_now, dict.
#include <optional>
#include <string>

#include "jinja/value.h"

namespace nanovllm::jinja {

// The function named `name`; nullopt when there is none (the name is then undefined).
std::optional<Value> global_function(const std::string& name);

}  // namespace nanovllm::jinja
