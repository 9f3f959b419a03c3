#include "server/api_error.h"

namespace nanovllm::server {

std::string ApiError::type() const {
  switch (status_) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status_ >= 500 ? "internal_server_error" : "invalid_request_error";
  }
}

nlohmann::json ApiError::to_json() const {
  nlohmann::json error = {{"message", what()}, {"type", type()}, {"param", nullptr}, {"code", status_}};
  if (!param_.empty()) error["param"] = param_;
  return {{"error", std::move(error)}};
}

}  // namespace nanovllm::server
