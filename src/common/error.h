#pragma once
// Errors are exceptions with context inside; the edges (CLI, API) turn them into one-line messages.
#include <stdexcept>
#include <string>

namespace nanovllm {

// Something the user handed us is wrong (model folder, request, flag). The message names the problem.
class InvalidInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The engine could not do what it must (device error, out of memory, internal invariant broken).
class EngineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace nanovllm
