#pragma once
// Stop strings as vLLM applies them: a stop string that ends inside the newly added text (it may start before
// it) finishes the request with reason "stop", and the output text is cut before it.
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace nanovllm {

struct StopMatch {
  size_t cut_at;      // text length to keep
  size_t stop_index;  // which stop string matched
};

// The earliest-starting stop string (first in `stops` on ties) whose occurrence ends after new_text_begin.
std::optional<StopMatch> find_stop_string(std::string_view text, size_t new_text_begin,
                                          std::span<const std::string> stops);

}  // namespace nanovllm
