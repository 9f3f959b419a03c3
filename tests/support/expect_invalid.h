#pragma once
// The error contract: bad input is an InvalidInput whose message names the problem (shared by the tests).
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "common/error.h"

namespace nanovllm::testing {

// Expects `fn` to throw InvalidInput whose message contains every one of `parts`.
template <class Fn>
void expect_invalid(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    FAIL() << "no exception; expected one mentioning " << *parts.begin();
  } catch (const InvalidInput& e) {
    const std::string message = e.what();
    for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << "message: " << message;
  }
}

}  // namespace nanovllm::testing
