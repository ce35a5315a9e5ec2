#include "server/http/responses.h"

#include "server/anthropic/errors.h"

#include <random>

namespace tessera {

namespace http = boost::beast::http;

namespace {

struct StatusPair {
  ApiStatus api;
  HttpStatus http;
};

constexpr StatusPair kStatuses[] = {
    {ApiStatus::kBadRequest, HttpStatus::bad_request},
    {ApiStatus::kUnauthorized, HttpStatus::unauthorized},
    {ApiStatus::kNotFound, HttpStatus::not_found},
    {ApiStatus::kMethodNotAllowed, HttpStatus::method_not_allowed},
    {ApiStatus::kPayloadTooLarge, HttpStatus::payload_too_large},
    {ApiStatus::kUnsupportedMediaType, HttpStatus::unsupported_media_type},
    {ApiStatus::kTooManyRequests, HttpStatus::too_many_requests},
    {ApiStatus::kHeaderFieldsTooLarge, HttpStatus::request_header_fields_too_large},
    {ApiStatus::kInternal, HttpStatus::internal_server_error},
    {ApiStatus::kServiceUnavailable, HttpStatus::service_unavailable},
    {ApiStatus::kGatewayTimeout, HttpStatus::gateway_timeout},
};

}  // namespace

HttpStatus ToHttpStatus(ApiStatus status) {
  for (const StatusPair& p : kStatuses) {
    if (p.api == status) return p.http;
  }
  return HttpStatus::internal_server_error;
}

ApiStatus ApiStatusFromHttp(int status) {
  for (const StatusPair& p : kStatuses) {
    if (static_cast<int>(p.http) == status) return p.api;
  }
  return ApiStatus::kInternal;
}

HttpResponse JsonResponse(HttpStatus status, const nlohmann::json& body) {
  HttpResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  res.prepare_payload();
  return res;
}

HttpResponse ErrorResponse(const ApiError& e) { return JsonResponse(ToHttpStatus(e.status), ErrorJson(e)); }

HttpResponse AnthropicErrorResponse(const ApiError& e) {
  HttpResponse res = JsonResponse(ToHttpStatus(e.status), anthropic::ErrorBody(e));
  if (const int64_t retry = RetryAfterSeconds(e); retry > 0) res.set(http::field::retry_after, std::to_string(retry));
  return res;
}

HttpResponse SseResponseHead() {
  HttpResponse head{HttpStatus::ok, 11};
  head.set(http::field::content_type, "text/event-stream; charset=utf-8");
  return head;
}

std::string RandomHex(int n) {
  // One generator per thread: no locking, seeded from the OS.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(static_cast<size_t>(n), '0');
  for (char& c : s) c = kHex[rng() & 15];
  return s;
}

}  // namespace tessera
