// HttpServer: HTTP/1.1 over Boost.Beast async I/O with keep-alive, request
// size limits, a route table and graceful drain.
//
// Threading: the caller runs the io_context on a few threads; each connection
// is served on its own strand, one request at a time (no pipelining overlap).
// Handlers run on that strand and must not block: long work is handed off and
// the response is sent later, from any thread, through HttpExchange::Send.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "common/status.h"
#include "server/http/responses.h"

namespace tessera {

class HttpSession;

// One request in flight. Owned jointly by the session and whoever will answer
// it; the connection stays open until Send (or destruction, which answers 500).
class HttpExchange {
 public:
  HttpExchange(std::shared_ptr<HttpSession> session, HttpRequest request, std::string request_id);
  ~HttpExchange();
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  const HttpRequest& request() const { return request_; }
  // The client's x-request-id, or a generated one; echoed on the response.
  const std::string& request_id() const { return request_id_; }
  // Sends the response. Thread-safe; only the first call has an effect.
  void Send(HttpResponse response);
  // Runs `fn` on the connection's strand (an io thread). Thread-safe.
  void Post(std::function<void()> fn);

 private:
  std::shared_ptr<HttpSession> session_;
  HttpRequest request_;
  std::string request_id_;
  std::atomic<bool> sent_{false};
};

using HttpHandler = std::function<void(std::shared_ptr<HttpExchange>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0: pick a free port
  uint64_t body_limit = 1 << 20;        // larger bodies get 413
  uint32_t header_limit = 16 * 1024;    // larger request heads get 431
  std::chrono::seconds idle_timeout{60};   // keep-alive idle / slow request read
  std::chrono::seconds write_timeout{60};
};

// State shared by the server and its sessions (sessions may outlive the server
// object until the io_context is destroyed).
struct HttpServerCore {
  HttpServerOptions options;
  // path -> method -> handler; written before Start, read-only afterwards.
  std::map<std::string, std::map<boost::beast::http::verb, HttpHandler>> routes;
  std::atomic<bool> draining{false};
  // The io_context has stopped for good: Send/Post become no-ops so nothing is
  // posted to it while it is being destroyed.
  std::atomic<bool> stopped{false};
  std::atomic<int64_t> in_flight{0};  // requests taken and not yet fully answered
};

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& ioc, HttpServerOptions options);
  ~HttpServer();

  // Registers a route (exact path, query string ignored). Call before Start.
  void Handle(boost::beast::http::verb method, const std::string& path, HttpHandler handler);
  // Resolves and binds host:port; fails with a clear message (e.g. port in use).
  Status Listen();
  // Starts accepting connections (asynchronously, on the io_context).
  void Start();
  // Stops accepting; later requests on open connections get 503 and close.
  // Thread-safe.
  void BeginDrain();
  // Call after the io_context has stopped, before it is destroyed.
  void MarkStopped() { core_->stopped.store(true); }
  bool draining() const { return core_->draining.load(); }
  int64_t in_flight() const { return core_->in_flight.load(); }
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
