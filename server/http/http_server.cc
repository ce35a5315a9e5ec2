#include "server/http/http_server.h"

#include <array>
#include <optional>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <spdlog/spdlog.h>

namespace tessera {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Bounds for the lingering close after an error response (see LingeringClose).
constexpr auto kLingerTimeout = std::chrono::seconds(5);
constexpr uint64_t kLingerMaxBytes = 64ull << 20;

bool IsHttpParseError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_method).category();
}

// A client-supplied id is echoed when it is short printable ASCII, else replaced.
std::string RequestIdFrom(const http::fields& headers) {
  auto it = headers.find("x-request-id");
  if (it != headers.end()) {
    const beast::string_view v = it->value();
    bool ok = !v.empty() && v.size() <= 200;
    for (char c : v) ok = ok && c > 0x20 && c < 0x7f;
    if (ok) return std::string(v);
  }
  return RandomHex(32);
}

std::string PathOf(beast::string_view target) {
  const size_t q = target.find_first_of("?#");
  return std::string(q == beast::string_view::npos ? target : target.substr(0, q));
}

}  // namespace

// One TCP connection. Lives while an async operation or an HttpExchange holds
// it; all members are touched only on the connection's strand.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, std::shared_ptr<HttpServerCore> core)
      : stream_(std::move(socket)), core_(std::move(core)) {}

  void Start() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&HttpSession::DoRead, shared_from_this()));
  }
  net::any_io_executor executor() { return stream_.get_executor(); }
  const HttpServerCore& core() const { return *core_; }

  // Writes the answer to the current request (strand only).
  void Write(HttpResponse res, const std::string& request_id) {
    res.set(http::field::server, "tessera");
    res.set("x-request-id", request_id);
    res.keep_alive(keep_alive_ && !core_->draining.load());
    res.prepare_payload();
    status_ = res.result_int();
    request_id_ = request_id;
    out_ = std::make_shared<HttpResponse>(std::move(res));
    stream_.expires_after(core_->options.write_timeout);
    http::async_write(stream_, *out_, beast::bind_front_handler(&HttpSession::OnWrite, shared_from_this()));
  }

 private:
  void DoRead() {
    parser_.emplace();
    parser_->body_limit(core_->options.body_limit);
    parser_->header_limit(core_->options.header_limit);
    stream_.expires_after(core_->options.idle_timeout);
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&HttpSession::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout) return Close();
    if (ec == http::error::body_limit) {
      return SendLocal({HttpStatus::payload_too_large,
                        "request body exceeds the limit of " + std::to_string(core_->options.body_limit) + " bytes",
                        "invalid_request_error", "", "request_too_large"});
    }
    if (ec == http::error::header_limit) {
      return SendLocal({HttpStatus::request_header_fields_too_large,
                        "request line and headers exceed the limit of " +
                            std::to_string(core_->options.header_limit) + " bytes",
                        "invalid_request_error", "", "request_header_fields_too_large"});
    }
    if (ec == http::error::partial_message) return Close();
    if (IsHttpParseError(ec)) {
      return SendLocal(BadRequest("malformed HTTP request: " + ec.message(), "", "bad_request"));
    }
    if (ec) return Close();
    stream_.expires_never();  // the handler may take a while; no read is pending
    Dispatch(parser_->release());
  }

  void Dispatch(HttpRequest req) {
    method_ = std::string(req.method_string());
    target_ = std::string(req.target());
    keep_alive_ = req.keep_alive();
    start_ = std::chrono::steady_clock::now();
    core_->in_flight.fetch_add(1);
    const std::string path = PathOf(req.target());
    const http::verb method = req.method();
    std::string id = RequestIdFrom(req);
    auto ex = std::make_shared<HttpExchange>(shared_from_this(), std::move(req), std::move(id));
    if (core_->draining.load()) {
      ex->Send(ErrorResponse({HttpStatus::service_unavailable, "server is shutting down", "server_error", "",
                              "shutting_down"}));
      return;
    }
    auto route = core_->routes.find(path);
    if (route == core_->routes.end()) {
      ex->Send(ErrorResponse({HttpStatus::not_found, "no route for " + method_ + " " + path, "invalid_request_error",
                              "", "not_found"}));
      return;
    }
    auto handler = route->second.find(method);
    if (handler == route->second.end()) {
      std::string allow;
      for (const auto& [verb, unused] : route->second) {
        allow += (allow.empty() ? "" : ", ") + std::string(http::to_string(verb));
      }
      HttpResponse res = ErrorResponse({HttpStatus::method_not_allowed,
                                        "method " + method_ + " is not allowed on " + path + " (allowed: " + allow + ")",
                                        "invalid_request_error", "", "method_not_allowed"});
      res.set(http::field::allow, allow);
      ex->Send(std::move(res));
      return;
    }
    try {
      handler->second(ex);
    } catch (const std::exception& e) {
      spdlog::error("http: handler for {} {} threw: {}", method_, path, e.what());
      ex->Send(ErrorResponse({HttpStatus::internal_server_error, "internal error", "server_error", "", "internal_error"}));
    }
  }

  // Answers a request that could not be parsed, then closes the connection.
  void SendLocal(const ApiError& error) {
    std::string id = RandomHex(32);
    method_ = "-";
    target_ = "-";
    // Fields parsed before the error are available even when the head is incomplete.
    if (parser_ && !parser_->get().method_string().empty()) {
      method_ = std::string(parser_->get().method_string());
      target_ = std::string(parser_->get().target());
      id = RequestIdFrom(parser_->get());
    }
    keep_alive_ = false;
    start_ = std::chrono::steady_clock::now();
    core_->in_flight.fetch_add(1);
    Write(ErrorResponse(error), id);
  }

  void OnWrite(beast::error_code ec, std::size_t) {
    const bool close = !out_->keep_alive();
    out_.reset();
    core_->in_flight.fetch_sub(1);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    const bool probe = method_ == "GET" && (target_ == "/health" || target_ == "/ready");
    spdlog::log(probe ? spdlog::level::debug : spdlog::level::info, "http: {} {} {} {:.1f}ms id={}", method_, target_,
                status_, ms, request_id_);
    if (ec) return Close();
    if (close) return LingeringClose();
    DoRead();
  }

  // Half-closes, then reads and discards what the client still sends (e.g. the
  // rest of an oversize body) so it sees our response instead of a reset.
  void LingeringClose() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(kLingerTimeout);
    DoDiscard();
  }
  void DoDiscard() {
    stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      self->discarded_ += n;
      if (ec || self->discarded_ > kLingerMaxBytes) return self->Close();
      self->DoDiscard();
    });
  }
  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::shared_ptr<HttpServerCore> core_;
  std::optional<http::request_parser<http::string_body>> parser_;
  // The request being answered (one at a time per connection).
  std::string method_, target_, request_id_;
  bool keep_alive_ = false;
  unsigned status_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::shared_ptr<HttpResponse> out_;
  std::array<char, 16384> discard_;
  uint64_t discarded_ = 0;
};

HttpExchange::HttpExchange(std::shared_ptr<HttpSession> session, HttpRequest request, std::string request_id)
    : session_(std::move(session)), request_(std::move(request)), request_id_(std::move(request_id)) {}

HttpExchange::~HttpExchange() {
  if (!sent_.load() && !session_->core().stopped.load()) {
    spdlog::error("http: request {} dropped without a response", request_id_);
    Send(ErrorResponse({HttpStatus::internal_server_error, "internal error: request dropped", "server_error", "",
                        "internal_error"}));
  }
}

void HttpExchange::Send(HttpResponse response) {
  if (sent_.exchange(true) || session_->core().stopped.load()) return;
  net::post(session_->executor(), [s = session_, r = std::move(response), id = request_id_]() mutable {
    s->Write(std::move(r), id);
  });
}

void HttpExchange::Post(std::function<void()> fn) {
  if (session_->core().stopped.load()) return;
  net::post(session_->executor(), [s = session_, fn = std::move(fn)] { fn(); });
}

HttpServer::HttpServer(net::io_context& ioc, HttpServerOptions options)
    : ioc_(ioc), core_(std::make_shared<HttpServerCore>()), acceptor_(net::make_strand(ioc)) {
  core_->options = std::move(options);
}

HttpServer::~HttpServer() = default;

void HttpServer::Handle(http::verb method, const std::string& path, HttpHandler handler) {
  core_->routes[path][method] = std::move(handler);
}

Status HttpServer::Listen() {
  const HttpServerOptions& o = core_->options;
  const std::string where = o.host + ":" + std::to_string(o.port);
  if (o.port < 0 || o.port > 65535) return InvalidArgument("serve: --port must be in [0, 65535]");
  beast::error_code ec;
  tcp::resolver resolver(ioc_);
  auto results = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
  if (ec || results.empty()) return InvalidArgument("serve: cannot resolve --host " + o.host + ": " + ec.message());
  const tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return FailedPrecondition("serve: cannot listen on " + where + ": " + ec.message());
  const tcp::endpoint local = acceptor_.local_endpoint(ec);
  bound_port_ = local.port();
  bound_address_ = local.address().to_string();
  return Status::Ok();
}

void HttpServer::Start() {
  net::dispatch(acceptor_.get_executor(), [this] { DoAccept(); });
}

void HttpServer::DoAccept() {
  acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // E.g. out of file descriptors: back off briefly instead of spinning.
      spdlog::warn("http: accept failed: {}", ec.message());
      auto timer = std::make_shared<net::steady_timer>(acceptor_.get_executor(), std::chrono::milliseconds(100));
      timer->async_wait([this, timer](beast::error_code) {
        if (acceptor_.is_open()) DoAccept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    std::make_shared<HttpSession>(std::move(socket), core_)->Start();
    DoAccept();
  });
}

void HttpServer::BeginDrain() {
  core_->draining.store(true);
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ec;
    acceptor_.close(ec);
  });
}

}  // namespace tessera
