// HttpServer: HTTP/1.1 over Boost.Beast async I/O with keep-alive, chunked
// streaming, client-disconnect detection, API keys, connection and request
// size limits, a route table and graceful drain.
//
// Threading: the caller runs the io_context on a few threads; each connection
// is served on its own strand, one request at a time (pipelined requests are
// buffered and answered in order). Handlers run on that strand and must not
// block: long work is handed off and the response is sent later, from any
// thread, through HttpExchange (Send, or StartStream/WriteChunk/EndStream).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/fields.hpp>

#include "common/status.h"
#include "server/http/responses.h"

namespace tessera {

class HttpSession;

// One request in flight. Owned jointly by the session and whoever will answer
// it; the connection stays open until the response is complete. Destroying it
// without a response answers 500 (or, mid-stream, closes the connection),
// unless the client is already gone. All methods are thread-safe; the I/O
// they start is posted to the connection's strand and happens in call order.
class HttpExchange {
 public:
  HttpExchange(std::shared_ptr<HttpSession> session, HttpRequest request, std::string request_id, uint64_t seq);
  ~HttpExchange();
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  const HttpRequest& request() const { return request_; }
  // The request target's path (no query string), not percent-decoded.
  std::string path() const;
  // The client's x-request-id, or a generated one; echoed on the response.
  const std::string& request_id() const { return request_id_; }
  // The id of the API key this request authenticated with (ApiKeyTenantId;
  // "" without --api-key or on a public route): its cache namespace under
  // --cache-isolation api-key. Set before the handler runs.
  const std::string& tenant() const { return tenant_; }

  // Sends a complete response. Only the first Send/StartStream has an effect.
  void Send(HttpResponse response);

  // Sends status line and headers with Transfer-Encoding: chunked; the body
  // of `head` is ignored. Its Content-Type is kept (e.g. text/event-stream).
  // Only the first Send/StartStream has an effect.
  void StartStream(HttpResponse head);
  // Queues one chunk (empty data is ignored; ignored before StartStream, after
  // EndStream or once closed()). If more than stream_buffer_limit bytes are
  // queued but unwritten the client is treated as gone (OnDisconnect fires).
  void WriteChunk(std::string data);
  // Writes the terminating chunk; the connection is then reused (keep-alive)
  // or closed as after Send.
  void EndStream();

  // True once the client is gone or the response was completed (Send or
  // EndStream called). Producers poll this to stop early.
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  // Registers `fn` to run once, on the strand, if the client goes away before
  // the response is complete (write error or timeout, buffer limit, or the
  // peer closing its socket, EOF included). Runs right away (posted) if the
  // client is already gone; never runs if the response completes first.
  // `fn` should not own this exchange (it is kept until the request ends).
  void OnDisconnect(std::function<void()> fn);

  // Runs `fn` on the connection's strand (an io thread).
  void Post(std::function<void()> fn);

 private:
  friend class HttpSession;

  std::shared_ptr<HttpSession> session_;
  HttpRequest request_;
  std::string request_id_;
  std::string tenant_;
  const uint64_t seq_;  // which request of the session this is
  std::atomic<bool> responded_{false};  // Send or StartStream taken
  std::atomic<bool> streaming_{false};  // StartStream took effect
  std::atomic<bool> ended_{false};      // Send or EndStream taken
  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> unwritten_{0};  // stream bytes queued, not yet written
};

using HttpHandler = std::function<void(std::shared_ptr<HttpExchange>)>;

struct RouteOptions {
  bool public_route = false;          // no API key needed
  bool serve_while_draining = false;  // answered normally while draining
  // The body must be JSON: a Content-Type other than application/json (or
  // application/*+json, parameters such as charset allowed), or none, is 415.
  bool json_body = false;
  // The shape of the errors the server itself answers on this route (401,
  // 503 while draining, 415): null is OpenAI's (ErrorResponse); the
  // Anthropic routes pass AnthropicErrorResponse.
  HttpResponse (*error_response)(const ApiError&) = nullptr;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0: pick a free port
  uint64_t body_limit = 1 << 20;        // larger bodies get 413
  uint32_t header_limit = 16 * 1024;    // larger request heads get 431
  std::chrono::seconds idle_timeout{60};   // keep-alive idle / slow request read
  std::chrono::seconds write_timeout{60};  // one write (a response or a batch of chunks)
  uint64_t stream_buffer_limit = 4 << 20;  // unwritten stream bytes before the client counts as gone
  int max_connections = 1024;              // more get 503 too_many_connections
  // Accepted keys, as `Authorization: Bearer <key>` or (Anthropic's header,
  // read when there is no Authorization) `x-api-key: <key>`; empty: no
  // authentication.
  std::vector<std::string> api_keys;
};

struct HttpRoute {
  HttpHandler handler;
  RouteOptions options;
};

// State shared by the server and its sessions (sessions may outlive the server
// object until the io_context is destroyed).
struct HttpServerCore {
  HttpServerOptions options;
  std::vector<std::string> api_key_tenants;  // ApiKeyTenantId of each options.api_keys entry
  // path -> method -> route; written before Start, read-only afterwards.
  std::map<std::string, std::map<boost::beast::http::verb, HttpRoute>> routes;
  // Tried in order when no exact path matches: paths that start with `prefix`
  // and go on past it (e.g. /v1/models/{id}).
  struct PrefixRoute {
    boost::beast::http::verb method;
    std::string prefix;
    HttpRoute route;
  };
  std::vector<PrefixRoute> prefix_routes;
  std::atomic<bool> draining{false};
  // The io_context has stopped for good: exchange methods become no-ops so
  // nothing is posted to it while it is being destroyed.
  std::atomic<bool> stopped{false};
  std::atomic<int64_t> in_flight{0};    // requests taken and not yet fully answered
  std::atomic<int64_t> connections{0};  // open sessions counted against max_connections
};

// %XX escapes decoded (invalid escapes are kept as they are).
std::string PercentDecode(std::string_view s);

// Whether a Content-Type header value names JSON (see RouteOptions::json_body).
bool IsJsonContentType(std::string_view content_type);

// Why a request head's body framing is refused (RFC 9112 sections 6.1 and
// 6.3: every ambiguity is a 400, the request-smuggling class), or nullopt:
// Transfer-Encoding other than exactly one `chunked`, or with Content-Length,
// or in HTTP/1.0; more than one Content-Length (even equal ones) or one that
// is not a single decimal number. `version` is 10 or 11.
std::optional<std::string> MessageFramingError(const boost::beast::http::fields& headers, unsigned version);

// Constant-time check of an Authorization header value against `keys`: the
// index of the key it carries, -1 for none. Exposed for tests.
int ApiKeyIndex(std::string_view authorization, const std::vector<std::string>& keys);
// The same for a bare key (an x-api-key header value; surrounding blanks ignored).
int BareApiKeyIndex(std::string_view key, const std::vector<std::string>& keys);
inline bool ApiKeyMatches(std::string_view authorization, const std::vector<std::string>& keys) {
  return ApiKeyIndex(authorization, keys) >= 0;
}

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& ioc, HttpServerOptions options);
  ~HttpServer();

  // Registers a route (exact path, query string ignored). Call before Start.
  void Handle(boost::beast::http::verb method, const std::string& path, HttpHandler handler,
              RouteOptions opts = {});
  // Registers a route for every path that starts with `prefix` and is longer
  // than it (exact routes win). Call before Start.
  void HandlePrefix(boost::beast::http::verb method, const std::string& prefix, HttpHandler handler,
                    RouteOptions opts = {});
  // Resolves and binds host:port; fails with a clear message (e.g. port in use).
  Status Listen();
  // Starts accepting connections (asynchronously, on the io_context).
  void Start();
  // Keeps accepting, but requests to routes not marked serve_while_draining
  // get 503 shutting_down with Connection: close. Thread-safe.
  void BeginDrain();
  // Closes the acceptor (the very end of shutdown). Thread-safe.
  void StopAccepting();
  // Call after the io_context has stopped, before it is destroyed.
  void MarkStopped() { core_->stopped.store(true); }
  bool draining() const { return core_->draining.load(); }
  int64_t in_flight() const { return core_->in_flight.load(); }
  int64_t connections() const { return core_->connections.load(); }
  // The bound port (useful with port 0) and address, valid after Listen.
  int port() const { return bound_port_; }
  std::string address() const { return bound_address_; }

 private:
  void DoAccept();

  boost::asio::io_context& ioc_;
  std::shared_ptr<HttpServerCore> core_;
  boost::asio::ip::tcp::acceptor acceptor_;
  int bound_port_ = 0;
  std::string bound_address_;
};

}  // namespace tessera
