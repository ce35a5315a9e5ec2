// Anthropic's error shape and SSE framing. An ApiError (the one error type of
// every front end, openai/api_error.h) keeps its status; only its body
// differs: {"type":"error","error":{"type","message"}}, the error type
// following the status as Anthropic's API names it. Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"

namespace tessera::anthropic {

// invalid_request_error (400, 405, 415, 431), authentication_error (401),
// not_found_error (404), request_too_large (413), rate_limit_error (429),
// overloaded_error (503), timeout_error (504), api_error (500).
const char* ErrorType(ApiStatus status);

// {"type":"error","error":{"type","message"}}.
nlohmann::json ErrorBody(const ApiError& error);

// "event: <name>\ndata: <compact json>\n\n" (invalid UTF-8 replaced).
std::string SseEvent(std::string_view name, const nlohmann::json& data);
// The `error` event a stream ends with when the request fails mid-way.
std::string SseError(const ApiError& error);

}  // namespace tessera::anthropic
