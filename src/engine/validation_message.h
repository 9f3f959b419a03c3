#pragma once
// Builds "<field> must be <rule>, got <value>" for the validate() methods of the public settings structs.
#include <sstream>
#include <string>
#include <type_traits>

#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm {

template <typename Value>
[[noreturn]] void throw_invalid_setting(const char* field, const char* rule, const Value& value) {
  std::ostringstream message;
  message << field << " must be " << rule << ", got ";
  if constexpr (std::is_convertible_v<Value, std::string>) {
    message << quoted_text(std::string(value));  // untrusted: cut short, control characters escaped
  } else {
    message << value;
  }
  throw InvalidInput(message.str());
}

}  // namespace nanovllm
