#include "ordered_line_writer.h"

#include "common/error.h"

namespace nanovllm::cli {

void OrderedLineWriter::set(size_t index, std::string line) {
  if (index >= lines_.size()) throw EngineError("output line " + std::to_string(index) + " is past the last one");
  if (has(index)) return;
  lines_[index] = std::move(line);
  bool wrote = false;
  while (next_ < lines_.size() && lines_[next_]) {
    out_ << *lines_[next_] << '\n';
    lines_[next_].reset();  // written: its memory is not needed any more
    ++next_;
    wrote = true;
  }
  if (wrote) out_.flush();
}

}  // namespace nanovllm::cli
