#pragma once
// Output lines that finish out of order but must appear in input order: each line is written (and flushed)
// as soon as every earlier one has been, so an interrupted or killed run keeps all of its finished prefix.
#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace nanovllm::cli {

class OrderedLineWriter {
 public:
  OrderedLineWriter(std::ostream& out, size_t num_lines) : out_(out), lines_(num_lines) {}

  // Line `index`'s text (without the newline); writes every line that is now next in order. A line set
  // twice keeps the first text.
  void set(size_t index, std::string line);
  bool has(size_t index) const { return index < next_ || lines_[index].has_value(); }
  size_t written() const { return next_; }

 private:
  std::ostream& out_;
  std::vector<std::optional<std::string>> lines_;
  size_t next_ = 0;  // lines before this one are written
};

}  // namespace nanovllm::cli
