// A minimal blocking HTTP/1.1 client (Boost.Beast) for the load generator:
// one connection per request, the response body delivered piece by piece as
// it arrives, so callers can timestamp every SSE chunk with steady_clock.
//
// Cancellation and timeouts: each request registers its socket in a
// CancelSlot; another thread may Cancel() it (shutdown(2) on the socket),
// which makes the blocked read return. Thread safety: a CancelSlot is shared
// between one request thread and any number of cancelling threads.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tessera::bench {

// http://HOST[:PORT][/PREFIX]; https is refused (not supported).
struct BaseUrl {
  std::string host;  // without brackets for IPv6 literals
  int port = 80;
  std::string prefix;  // "" or "/something" without a trailing slash
};
StatusOr<BaseUrl> ParseBaseUrl(std::string_view url);

// Whether every address `host` resolves to is a loopback address
// (errors if it does not resolve).
StatusOr<bool> IsLoopbackHost(const std::string& host, int port);

class CancelSlot {
 public:
  // Shuts the registered socket down (now, or as soon as one is registered).
  void Cancel(std::string reason);
  bool cancelled() const;
  std::string reason() const;

 private:
  friend class SocketRegistration;
  mutable std::mutex mu_;
  int fd_ = -1;
  bool cancelled_ = false;
  std::string reason_;
};

struct HttpResponse {
  int status = 0;
  std::string body;  // for non-streamed reads (and error bodies)
};

using Clock = std::chrono::steady_clock;
// Receives each piece of body bytes with the time it was read.
using BodySink = std::function<void(std::string_view bytes, Clock::time_point at)>;

struct HttpRequest {
  std::string method = "GET";
  std::string target;  // path + query
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Sends `req` to base.host:base.port. With a sink, a 200 response's body is
// streamed to it and not kept; other statuses are read whole into `body`.
// Errors: connection/read failures, cancellation (kCancelled with the slot's
// reason). `slot` may be null.
StatusOr<HttpResponse> SendHttp(const BaseUrl& base, const HttpRequest& req, const BodySink& sink,
                                CancelSlot* slot);

}  // namespace tessera::bench
