#pragma once
#include <stdexcept>

namespace nanovllm::jinja {

// A runtime error without a line; the statement that runs it adds the line.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace nanovllm::jinja
