#pragma once
// A Jinja2 interpreter for the subset chat templates use, configured as transformers configures Jinja
// (trim_blocks, lstrip_blocks, loop controls). Anything outside the subset is an InvalidInput naming the
// construct and its line.
#include <memory>
#include <string>
#include <unordered_map>

#include "jinja/value.h"

namespace nanovllm::jinja {

struct Node;

class Template {
 public:
  // Parses now; syntax errors throw InvalidInput("chat template line N: ...").
  explicit Template(std::string source);
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();

  std::string render(const std::unordered_map<std::string, Value>& variables) const;

 private:
  std::unique_ptr<Node> root_;
};

}  // namespace nanovllm::jinja
