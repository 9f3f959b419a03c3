#pragma once
// A whole HTTP reply as the API hands it to the connection: status, content type and body.
#include <string>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace nanovllm::server {

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

// Bodies are JSON of text from outside (prompts, outputs): invalid UTF-8 becomes U+FFFD instead of throwing.
inline std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline HttpReply json_reply(const nlohmann::json& body, int status = 200) {
  return {status, "application/json", dump_json(body)};
}

inline HttpReply error_reply(const ApiError& error) { return json_reply(error.to_json(), error.status()); }

}  // namespace nanovllm::server
