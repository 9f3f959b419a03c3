#pragma once
// Parsing JSON that came from outside (request lines, config.json, tokenizer files, safetensors headers).
// Nesting is capped while parsing: the code that walks, copies, prints or converts a parsed value recurses
// once per level, so a value 100k levels deep would overflow the stack there. Every failure is an
// InvalidInput that names the source and quotes no more than an excerpt.
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm {

// Deeper than any real config, tokenizer or chat request (JSON schemas in tool definitions stay far below),
// shallow enough that recursive consumers need only a few hundred KiB of stack.
inline constexpr int kMaxJsonDepth = 128;

// Whether an object may repeat a key (the last one wins, as in Python) or the repeat is an error.
enum class DuplicateKeys { kLastWins, kReject };

namespace detail {
class JsonDepthExceeded : public std::exception {};
struct JsonDuplicateKey : std::exception {
  explicit JsonDuplicateKey(std::string k) : key(std::move(k)) {}
  std::string key;
};

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is what the user needs.
inline std::string_view without_exception_id(std::string_view what) {
  const size_t end = what.find("] ");
  return what.starts_with("[json.exception.") && end != std::string_view::npos ? what.substr(end + 2) : what;
}
}  // namespace detail

// Parses `text`; `source` names it in errors ("config.json", "line 3"). Throws InvalidInput for malformed
// JSON, a number out of range (1e999), nesting deeper than kMaxJsonDepth or, with kReject, a repeated key.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, const std::string& source, DuplicateKeys duplicates = DuplicateKeys::kLastWins) {
  std::vector<std::set<std::string>> keys_of_open_objects;  // only tracked with kReject
  const auto guard = [&](int depth, typename Json::parse_event_t event, Json& parsed) {
    using Event = typename Json::parse_event_t;
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMaxJsonDepth)
      throw detail::JsonDepthExceeded();
    if (duplicates == DuplicateKeys::kReject) {
      if (event == Event::object_start) keys_of_open_objects.emplace_back();
      else if (event == Event::object_end) keys_of_open_objects.pop_back();
      else if (event == Event::key && !keys_of_open_objects.back().insert(parsed.template get<std::string>()).second)
        throw detail::JsonDuplicateKey(parsed.template get<std::string>());
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), guard);
  } catch (const detail::JsonDepthExceeded&) {
    throw InvalidInput(source + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  } catch (const detail::JsonDuplicateKey& e) {
    throw InvalidInput(source + ": key " + quoted_text(e.key) + " appears twice in one object");
  } catch (const typename Json::parse_error& e) {
    throw InvalidInput(source + ": malformed JSON at byte " + std::to_string(e.byte) + ": " +
                       escaped_excerpt(detail::without_exception_id(e.what()), 2 * kQuotedMaxBytes));
  } catch (const typename Json::exception& e) {  // out_of_range: a number beyond double (1e999)
    throw InvalidInput(source + ": " + escaped_excerpt(detail::without_exception_id(e.what()), 2 * kQuotedMaxBytes));
  }
}

// Reads and parses a JSON file; errors name the file.
template <class Json = nlohmann::json>
Json read_json_file(const std::filesystem::path& path, DuplicateKeys duplicates = DuplicateKeys::kLastWins) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidInput(path.string() + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_json<Json>(text.str(), path.string(), duplicates);
}

}  // namespace nanovllm
