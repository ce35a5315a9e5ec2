#include "bench/tessera_bench/http_client.h"

#include <sys/socket.h>

#include <cstdint>
#include <limits>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

namespace tessera::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

StatusOr<BaseUrl> ParseBaseUrl(std::string_view url) {
  constexpr std::string_view kHttp = "http://";
  if (url.substr(0, 8) == "https://") return InvalidArgument("--base-url: https is not supported (use http://)");
  if (url.substr(0, kHttp.size()) != kHttp) return InvalidArgument("--base-url must start with http://, got '" + std::string(url) + "'");
  std::string_view rest = url.substr(kHttp.size());
  BaseUrl out;
  std::string_view hostport = rest;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    out.prefix = std::string(rest.substr(slash));
    while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
  }
  std::string_view port;
  if (!hostport.empty() && hostport.front() == '[') {  // [v6]:port
    auto close = hostport.find(']');
    if (close == std::string_view::npos) return InvalidArgument("--base-url: unterminated '[' in host");
    out.host = std::string(hostport.substr(1, close - 1));
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return InvalidArgument("--base-url: expected ':' after ']'");
      port = after.substr(1);
    }
  } else {
    auto colon = hostport.rfind(':');
    out.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) port = hostport.substr(colon + 1);
  }
  if (out.host.empty()) return InvalidArgument("--base-url: empty host in '" + std::string(url) + "'");
  if (!port.empty()) {
    int p = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || p > 65535) return InvalidArgument("--base-url: bad port '" + std::string(port) + "'");
      p = p * 10 + (c - '0');
    }
    if (p < 1 || p > 65535) return InvalidArgument("--base-url: port out of range: " + std::string(port));
    out.port = p;
  }
  return out;
}

StatusOr<bool> IsLoopbackHost(const std::string& host, int port) {
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return Status(StatusCode::kUnavailable, "cannot resolve host '" + host + "': " + ec.message());
  bool any = false;
  for (const auto& r : results) {
    any = true;
    if (!r.endpoint().address().is_loopback()) return false;
  }
  return any;
}

void CancelSlot::Cancel(std::string reason) {
  std::lock_guard lock(mu_);
  if (cancelled_) return;
  cancelled_ = true;
  reason_ = std::move(reason);
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

bool CancelSlot::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

std::string CancelSlot::reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

// Registers a socket in a slot for its lifetime; the fd is unregistered before
// the socket closes, so Cancel never touches a reused descriptor.
class SocketRegistration {
 public:
  SocketRegistration(CancelSlot* slot, int fd) : slot_(slot) {
    if (!slot_) return;
    std::lock_guard lock(slot_->mu_);
    slot_->fd_ = fd;
    if (slot_->cancelled_) ::shutdown(fd, SHUT_RDWR);
  }
  ~SocketRegistration() {
    if (!slot_) return;
    std::lock_guard lock(slot_->mu_);
    slot_->fd_ = -1;
  }
  SocketRegistration(const SocketRegistration&) = delete;
  SocketRegistration& operator=(const SocketRegistration&) = delete;

 private:
  CancelSlot* slot_;
};

namespace {

Status IoError(const char* what, const boost::system::error_code& ec, CancelSlot* slot) {
  if (slot && slot->cancelled()) return Status(StatusCode::kCancelled, slot->reason());
  return Status(StatusCode::kUnavailable, std::string(what) + ": " + ec.message());
}

}  // namespace

StatusOr<HttpResponse> SendHttp(const BaseUrl& base, const HttpRequest& req, const BodySink& sink,
                                CancelSlot* slot) {
  if (slot && slot->cancelled()) return Status(StatusCode::kCancelled, slot->reason());
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(base.host, std::to_string(base.port), ec);
  if (ec) return IoError("resolve", ec, slot);
  tcp::socket sock(io);
  Status last = Status(StatusCode::kUnavailable, "connect: no address");
  bool connected = false;
  for (const auto& ep : endpoints) {
    sock.open(ep.endpoint().protocol(), ec);
    if (ec) continue;
    SocketRegistration reg(slot, sock.native_handle());
    sock.connect(ep.endpoint(), ec);
    if (!ec) {
      connected = true;
      break;
    }
    last = IoError("connect", ec, slot);
    sock.close(ec);
  }
  if (!connected) return last;
  SocketRegistration reg(slot, sock.native_handle());
  sock.set_option(tcp::no_delay(true), ec);

  http::request<http::string_body> hreq;
  hreq.method(req.method == "POST" ? http::verb::post : http::verb::get);
  hreq.target(req.target);
  hreq.version(11);
  hreq.set(http::field::host, base.host + ":" + std::to_string(base.port));
  hreq.set(http::field::user_agent, "tessera-bench");
  hreq.set(http::field::connection, "close");
  for (const auto& [k, v] : req.headers) hreq.set(k, v);
  if (!req.body.empty() || req.method == "POST") {
    hreq.body() = req.body;
    hreq.prepare_payload();
  }
  http::write(sock, hreq, ec);
  if (ec) return IoError("write", ec, slot);

  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> parser;
  // Not boost::none: Boost 1.74 compares lengths against the optional, and
  // any length is greater than none.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  http::read_header(sock, buf, parser, ec);
  if (ec) return IoError("read header", ec, slot);
  HttpResponse out;
  out.status = static_cast<int>(parser.get().result_int());
  const bool stream = sink && out.status == 200;
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    http::read_some(sock, buf, parser, ec);
    const auto at = Clock::now();
    if (ec == http::error::need_buffer) ec = {};
    const size_t n = sizeof(chunk) - parser.get().body().size;
    if (n > 0) {
      if (stream) {
        sink(std::string_view(chunk, n), at);
      } else if (out.body.size() < (1u << 20)) {
        out.body.append(chunk, n);
      }
    }
    if (ec == http::error::end_of_stream && parser.is_done()) break;
    if (ec) return IoError("read body", ec, slot);
  }
  sock.shutdown(tcp::socket::shutdown_both, ec);
  return out;
}

}  // namespace tessera::bench
