#pragma once
// Ways to cut a text into the deltas a stream receives: whole, at every single cut point, one byte at a
// time, and seeded random cuttings into many pieces.
#include <cstddef>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::server {

inline std::vector<std::vector<std::string_view>> text_cuttings(std::string_view text, int random_cuttings = 200) {
  std::vector<std::vector<std::string_view>> cuttings;
  for (size_t cut = 0; cut <= text.size(); ++cut) cuttings.push_back({text.substr(0, cut), text.substr(cut)});
  std::vector<std::string_view>& bytes = cuttings.emplace_back();
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  std::mt19937 random(static_cast<unsigned>(text.size()));
  for (int n = 0; n < random_cuttings; ++n) {
    std::vector<std::string_view>& pieces = cuttings.emplace_back();
    std::uniform_int_distribution<size_t> length(0, 6);
    for (size_t pos = 0; pos < text.size();) {
      const size_t len = std::min(length(random), text.size() - pos);
      pieces.push_back(text.substr(pos, len));  // empty deltas too: a stream must take them
      pos += len;
    }
  }
  return cuttings;
}

// The cutting as a readable list, for failure messages.
inline std::string describe_cutting(const std::vector<std::string_view>& pieces) {
  std::string out;
  for (std::string_view piece : pieces) out += (out.empty() ? "[" : ", [") + std::string(piece) + "]";
  return out;
}

}  // namespace nanovllm::server
