#include "server/anthropic/errors.h"

#include "server/openai/sse.h"

namespace tessera::anthropic {

const char* ErrorType(ApiStatus status) {
  switch (status) {
    case ApiStatus::kBadRequest:
    case ApiStatus::kMethodNotAllowed:
    case ApiStatus::kUnsupportedMediaType:
    case ApiStatus::kHeaderFieldsTooLarge: return "invalid_request_error";
    case ApiStatus::kUnauthorized: return "authentication_error";
    case ApiStatus::kNotFound: return "not_found_error";
    case ApiStatus::kPayloadTooLarge: return "request_too_large";
    case ApiStatus::kTooManyRequests: return "rate_limit_error";
    case ApiStatus::kServiceUnavailable: return "overloaded_error";
    case ApiStatus::kGatewayTimeout: return "timeout_error";
    case ApiStatus::kInternal: return "api_error";
  }
  return "api_error";
}

nlohmann::json ErrorBody(const ApiError& error) {
  return {{"type", "error"}, {"error", {{"type", ErrorType(error.status)}, {"message", error.message}}}};
}

std::string SseEvent(std::string_view name, const nlohmann::json& data) {
  return "event: " + std::string(name) + "\ndata: " + openai::DumpJson(data) + "\n\n";
}

std::string SseError(const ApiError& error) { return SseEvent("error", ErrorBody(error)); }

}  // namespace tessera::anthropic
