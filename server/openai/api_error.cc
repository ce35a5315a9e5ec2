#include "server/openai/api_error.h"

#include <algorithm>
#include <string_view>

namespace tessera {

ApiError BadRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

nlohmann::json ErrorJson(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return {{"error", err}};
}

std::string QuotedParam(const std::string& message) {
  const size_t a = message.find('\'');
  if (a == std::string::npos) return "";
  const size_t b = message.find('\'', a + 1);
  return b == std::string::npos ? "" : message.substr(a + 1, b - a - 1);
}

int64_t RetryAfterSeconds(const ApiError& e) {
  if (e.status == ApiStatus::kServiceUnavailable) return 5;
  if (e.status != ApiStatus::kTooManyRequests) return 0;
  static constexpr std::string_view kHead = "retry after ", kTail = " s";
  const std::string& m = e.message;
  if (!m.ends_with(kTail)) return 1;
  const size_t end = m.size() - kTail.size();
  size_t begin = end;
  while (begin > 0 && m[begin - 1] >= '0' && m[begin - 1] <= '9') --begin;
  if (begin == end || end - begin > 9 || begin < kHead.size() || m.compare(begin - kHead.size(), kHead.size(), kHead)) {
    return 1;
  }
  return std::max<int64_t>(1, std::stoll(m.substr(begin, end - begin)));
}

ApiError ErrorFromStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return BadRequest(s.message(), QuotedParam(s.message()));
    case StatusCode::kOutOfRange:
      return BadRequest(s.message(), QuotedParam(s.message()), "context_length_exceeded");
    case StatusCode::kFailedPrecondition: return BadRequest(s.message(), "", "unsupported");
    case StatusCode::kNotFound: return {ApiStatus::kNotFound, s.message(), "invalid_request_error", "", "not_found"};
    case StatusCode::kResourceExhausted: {
      // A budget that is full now names its field ('prompt_cache_retention': ...); the queue names none.
      std::string param = QuotedParam(s.message());
      const char* code = param.empty() ? "queue_full" : "budget_exceeded";
      return {ApiStatus::kTooManyRequests, s.message(), "rate_limit_error", std::move(param), code};
    }
    case StatusCode::kUnavailable:
      return {ApiStatus::kServiceUnavailable, s.message(), "server_error", "", "unavailable"};
    case StatusCode::kDeadlineExceeded:
      return {ApiStatus::kGatewayTimeout, s.message(), "timeout_error", "", "timeout"};
    default:
      return {ApiStatus::kInternal, "internal error: " + s.message(), "server_error", "", "internal_error"};
  }
}

}  // namespace tessera
