// JSON and OpenAI-style error responses shared by the HTTP server and routes.
// Pure functions; thread-safe.
#pragma once

#include <string>

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace tessera {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;
using HttpStatus = boost::beast::http::status;

// One OpenAI error object: {"error":{"message","type","param","code"}}.
// An empty `param` or `code` is written as null.
struct ApiError {
  HttpStatus status = HttpStatus::bad_request;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};

ApiError BadRequest(std::string message, std::string param = "", std::string code = "");

// Serialises `body` (invalid UTF-8 is replaced, never thrown on) as
// application/json with the given status.
HttpResponse JsonResponse(HttpStatus status, const nlohmann::json& body);
HttpResponse ErrorResponse(const ApiError& error);

// A random lowercase hex string of `n` characters (ids for requests/completions).
std::string RandomHex(int n);

}  // namespace tessera
