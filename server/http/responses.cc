#include "server/http/responses.h"

#include <random>

namespace tessera {

namespace http = boost::beast::http;

ApiError BadRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

HttpResponse JsonResponse(HttpStatus status, const nlohmann::json& body) {
  HttpResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  res.prepare_payload();
  return res;
}

HttpResponse ErrorResponse(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return JsonResponse(e.status, {{"error", err}});
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
