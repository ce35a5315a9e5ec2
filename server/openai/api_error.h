// ApiError: an OpenAI-style error, the answer to a refused or failed request,
// whatever the wire. Its status is this enum, not a transport's: server/http
// maps it to an HTTP status (responses.h, ToHttpStatus) and server/grpc to a
// gRPC code (status.h, StatusFromApiError), each in one place
// (docs/architecture.md, "Server"). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tessera {

// The outcomes the front ends report (HTTP spelling in the comments).
enum class ApiStatus {
  kBadRequest,             // 400
  kUnauthorized,           // 401
  kNotFound,               // 404
  kMethodNotAllowed,       // 405
  kPayloadTooLarge,        // 413
  kUnsupportedMediaType,   // 415
  kTooManyRequests,        // 429
  kHeaderFieldsTooLarge,   // 431
  kInternal,               // 500
  kServiceUnavailable,     // 503
  kGatewayTimeout,         // 504
};

// One OpenAI error object: {"error":{"message","type","param","code"}}.
// An empty `param` or `code` is written as null.
struct ApiError {
  ApiStatus status = ApiStatus::kBadRequest;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};

ApiError BadRequest(std::string message, std::string param = "", std::string code = "");

// {"error":{...}} with empty param/code as null (the body of an error answer,
// and the data of a mid-stream error event).
nlohmann::json ErrorJson(const ApiError& error);

// An engine or validation Status as the error to send: INVALID_ARGUMENT and
// OUT_OF_RANGE (code context_length_exceeded) are 400s whose param is the
// first '...'-quoted word of the message, FAILED_PRECONDITION a 400
// "unsupported", NOT_FOUND 404, RESOURCE_EXHAUSTED 429 queue_full,
// UNAVAILABLE 503, DEADLINE_EXCEEDED 504, anything else 500 "internal error: ...".
ApiError ErrorFromStatus(const Status& status);

// Seconds a client should wait before retrying (HTTP Retry-After): a 429
// whose message ends in "retry after N s" (SLO-aware admission says when its
// queue drains) N, any other 429 1, a 503 5; 0 for the rest (no header).
int64_t RetryAfterSeconds(const ApiError& error);

// The first '...'-quoted word of a validation message ("" if none): the
// parameter it names.
std::string QuotedParam(const std::string& message);

}  // namespace tessera
