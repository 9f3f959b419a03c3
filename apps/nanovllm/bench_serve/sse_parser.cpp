#include "bench_serve/sse_parser.h"

namespace nanovllm::cli {

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> events;
  for (const char c : bytes) {
    if (after_cr_ && c == '\n') {
      after_cr_ = false;
      continue;
    }
    after_cr_ = c == '\r';
    if (c == '\r' || c == '\n') {
      take_line(events);
      continue;
    }
    line_ += c;
    if (line_.size() + event_.data.size() > max_event_bytes_)
      throw SseError("an event longer than " + std::to_string(max_event_bytes_) + " bytes");
  }
  return events;
}

void SseParser::take_line(std::vector<SseEvent>& events) {
  const std::string_view line = line_;
  if (line.empty()) {  // the event ends; one without data is no event
    if (has_data_) events.push_back(std::move(event_));
    event_ = {};
    has_data_ = false;
  } else if (!line.starts_with(':')) {  // a comment otherwise
    const size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
    if (value.starts_with(' ')) value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) event_.data += '\n';
      event_.data += value;
      has_data_ = true;
    } else if (field == "event") {
      event_.type = value;
    }  // id, retry and unknown fields mean nothing to a benchmark
  }
  line_.clear();
}

}  // namespace nanovllm::cli
