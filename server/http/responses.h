// JSON and OpenAI- or Anthropic-style error responses shared by the HTTP server and routes.
// Pure functions; thread-safe.
#pragma once

#include <string>

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"

namespace tessera {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;
using HttpStatus = boost::beast::http::status;

// The one mapping of an ApiError's status to HTTP, and back (an instance's
// HTTP error answer, as the router reads it: an unknown status is kInternal).
HttpStatus ToHttpStatus(ApiStatus status);
ApiStatus ApiStatusFromHttp(int status);

// Serialises `body` (invalid UTF-8 is replaced, never thrown on) as
// application/json with the given status.
HttpResponse JsonResponse(HttpStatus status, const nlohmann::json& body);
// ErrorJson(error) with ToHttpStatus(error.status).
HttpResponse ErrorResponse(const ApiError& error);
// The same error in Anthropic's shape (anthropic/errors.h), with Retry-After
// on 429 and 503 (RetryAfterSeconds).
HttpResponse AnthropicErrorResponse(const ApiError& error);
// The head of a server-sent-event stream: 200, text/event-stream (UTF-8).
HttpResponse SseResponseHead();

// A random lowercase hex string of `n` characters (ids for requests/completions).
std::string RandomHex(int n);

}  // namespace tessera
