#include "bench_serve/base_url.h"

#include <algorithm>

#include "common/error.h"
#include "common/quoted.h"

namespace nanovllm::cli {

BaseUrl BaseUrl::parse(std::string_view url) {
  const auto bad = [&](const std::string& why) { return InvalidInput("--base-url " + quoted_text(url) + ": " + why); };
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme))
    throw bad(url.starts_with("https://") ? "https is not supported (plain http only)" : "must start with http://");
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  BaseUrl u;
  if (slash != std::string_view::npos) u.path = rest.substr(slash);
  while (u.path.ends_with('/')) u.path.pop_back();
  const size_t colon = authority.rfind(':');
  const bool bracketed = authority.starts_with('[');  // [::1]:8000
  const bool has_port = colon != std::string_view::npos && (!bracketed || colon > authority.find(']'));
  u.host = authority.substr(0, has_port ? colon : authority.size());
  u.port = has_port ? authority.substr(colon + 1) : "80";
  if (bracketed && u.host.size() >= 2 && u.host.ends_with(']')) u.host = u.host.substr(1, u.host.size() - 2);
  if (u.host.empty()) throw bad("no host");
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  if (u.port.empty() || u.port.size() > 5 || !std::all_of(u.port.begin(), u.port.end(), is_digit) ||
      std::stoi(u.port) < 1 || std::stoi(u.port) > 65535)
    throw bad("the port must be a number in [1, 65535]");
  const auto is_url_text = [](char c) { return c > ' ' && c < 0x7F; };
  if (!std::all_of(url.begin(), url.end(), is_url_text)) throw bad("spaces or control characters");
  return u;
}

}  // namespace nanovllm::cli
