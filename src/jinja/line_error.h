#pragma once
// Template errors as users see them: InvalidInput("chat template line N: ..."), for syntax and rendering alike.
#include <string>

#include "common/error.h"

namespace nanovllm::jinja {

[[noreturn]] inline void fail_at_line(int line, const std::string& what) {
  throw InvalidInput("chat template line " + std::to_string(line) + ": " + what);
}

}  // namespace nanovllm::jinja
