#include "tokenizer/stop_strings.h"

namespace nanovllm {

std::optional<StopMatch> find_stop_string(std::string_view text, size_t new_text_begin,
                                          std::span<const std::string> stops) {
  std::optional<StopMatch> best;
  for (size_t s = 0; s < stops.size(); ++s) {
    const std::string& stop = stops[s];
    if (stop.empty() || stop.size() > text.size()) continue;
    // Occurrences ending at or before new_text_begin were already checked when that text was new.
    const size_t from = new_text_begin >= stop.size() ? new_text_begin - stop.size() + 1 : 0;
    const size_t at = text.find(stop, from);
    if (at == std::string_view::npos) continue;
    if (!best || at < best->cut_at) best = StopMatch{at, s};
  }
  return best;
}

}  // namespace nanovllm
