#pragma once
// Server-sent events (the text/event-stream format of streamed OpenAI responses), parsed incrementally from
// bytes as they arrive: lines end in \n, \r\n or \r (a pair may be split between reads), ':' starts a
// comment, the data lines of one event join with \n, and a blank line ends the event.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::cli {

struct SseEvent {
  std::string type;  // the "event:" field; empty for the default "message"
  std::string data;
};

// A stream that is not valid event-stream text (an event larger than the parser accepts).
class SseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SseParser {
 public:
  // Events (or single lines) beyond max_event_bytes throw SseError rather than grow without end.
  explicit SseParser(size_t max_event_bytes = size_t{1} << 20) : max_event_bytes_(max_event_bytes) {}

  // The events that `bytes` completes, in order.
  std::vector<SseEvent> feed(std::string_view bytes);
  // Whether bytes of an unfinished event are waiting (a stream that ends here was cut off).
  bool mid_event() const { return !line_.empty() || has_data_ || !event_.type.empty(); }

 private:
  void take_line(std::vector<SseEvent>& events);

  size_t max_event_bytes_;
  std::string line_;
  bool after_cr_ = false;  // the last byte was \r: a \n next belongs to the same line end
  bool has_data_ = false;
  SseEvent event_;
};

}  // namespace nanovllm::cli
