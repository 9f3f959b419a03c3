#pragma once
// The server a serving benchmark talks to, from --base-url: plain HTTP (no TLS), a host, a port (80 when
// not given) and an optional path that prefixes every endpoint.
#include <string>
#include <string_view>

namespace nanovllm::cli {

struct BaseUrl {
  std::string host, port, path;  // path: "" or "/prefix" without a trailing slash

  // Throws InvalidInput naming the URL and what is wrong with it.
  static BaseUrl parse(std::string_view url);
  // The request target for an endpoint path ("/v1/completions").
  std::string target(std::string_view endpoint) const { return path + std::string(endpoint); }
  // The Host header's value.
  std::string host_header() const {
    return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;  // IPv6 in brackets
  }
};

}  // namespace nanovllm::cli
