#pragma once
// An HTTP API error as OpenAI's servers report it: a status code and {"error": {"message", "type", "param",
// "code"}}. Thrown where a request is found wrong; the connection turns it into the reply.
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace nanovllm::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {})
      : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }  // the request field at fault, when one is
  // OpenAI's error type for the status: invalid_request_error (4xx), authentication_error (401), ...
  std::string type() const;
  nlohmann::json to_json() const;

 private:
  int status_;
  std::string param_;
};

// A 400 naming `field`.
inline ApiError invalid_field(const std::string& field, const std::string& message) {
  return ApiError(400, message, field);
}

}  // namespace nanovllm::server
