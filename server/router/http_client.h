// A small blocking HTTP/1.1 client for the router's calls to instances: one
// request per connection (Connection: close), body streamed to a callback as
// it arrives (chunked transfer decoded), so SSE relays token by token.
// Each call is independent; thread-safe. Costs one TCP connect per request
// (loopback/cluster-local: well under a millisecond).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tessera {

struct HttpCallOptions {
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds idle_timeout{30000};  // no byte for this long: the peer counts as dead
  std::string content_type = "application/json";
  // Sent as `Authorization: Bearer <bearer>` when not empty: the router's own
  // credential (--internal-api-key-file), never a client's.
  std::string bearer;
  // Extra request headers (name, value), e.g. the client's tenant a relay
  // names to an instance with the router's bearer. Values must not hold CR/LF.
  std::vector<std::pair<std::string, std::string>> headers;
  // Polled about every 250 ms while the call waits for its peer (connect,
  // send, read); true ends the call with UNAVAILABLE "abandoned". For a peer
  // that stops answering without closing (frozen, partitioned), which the
  // router's health polls notice long before idle_timeout. Called on the
  // calling thread.
  std::function<bool()> abandon;
};

struct HttpCallResult {
  int status = 0;  // 0: no status line arrived
  std::string body;  // when no on_body callback was given
};

// Sends `method path` to host:port. `on_body` (optional) gets the decoded body
// in pieces; returning false stops reading (the connection is closed).
// UNAVAILABLE when the peer cannot be reached, closes early (a truncated
// chunked body or fewer bytes than Content-Length) or stalls past
// idle_timeout; the result's status is then whatever arrived.
Status HttpCall(const std::string& host, int port, const std::string& method, const std::string& path,
                const std::string& body, const HttpCallOptions& options, HttpCallResult* result,
                const std::function<bool(std::string_view)>& on_body = {});

// "host:port" -> parts. INVALID_ARGUMENT naming `what` otherwise.
Status ParseHostPort(const std::string& s, const std::string& what, std::string* host, int* port);

}  // namespace tessera
