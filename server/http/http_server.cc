#include "server/http/http_server.h"
#include "common/log.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>

#include "scheduler/block_hash.h"

namespace tessera {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Bounds for the lingering close after an error response (see LingeringClose).
constexpr auto kLingerTimeout = std::chrono::seconds(5);
constexpr auto kRejectLingerTimeout = std::chrono::seconds(1);
constexpr uint64_t kLingerMaxBytes = 64ull << 20;
// Pipelined bytes buffered while a request is being answered; beyond this the
// disconnect watcher stops reading until the response is done.
constexpr size_t kWatchBufferLimit = 64 * 1024;

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

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void RunCallback(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    LogError("http: disconnect callback threw: {}", e.what());
  } catch (...) {
    LogError("http: disconnect callback threw");
  }
}

}  // namespace

bool IsJsonContentType(std::string_view v) {
  v = Trim(v.substr(0, v.find(';')));
  std::string lower(v);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "application/json") return true;
  return lower.rfind("application/", 0) == 0 && lower.size() > 17 &&
         lower.compare(lower.size() - 5, 5, "+json") == 0;
}

std::optional<std::string> MessageFramingError(const http::fields& headers, unsigned version) {
  int te_fields = 0, cl_fields = 0;
  std::string_view te;
  for (const auto& f : headers) {
    if (f.name() == http::field::transfer_encoding) {
      ++te_fields;
      te = Trim(std::string_view(f.value().data(), f.value().size()));
    } else if (f.name() == http::field::content_length) {
      ++cl_fields;
      const std::string_view v = Trim(std::string_view(f.value().data(), f.value().size()));
      if (v.empty() || v.find_first_not_of("0123456789") != std::string_view::npos) {
        return "Content-Length must be one decimal number";
      }
    }
  }
  if (cl_fields > 1) return "more than one Content-Length";
  if (te_fields == 0) return std::nullopt;
  if (version < 11) return "Transfer-Encoding in an HTTP/1.0 request";
  if (te_fields > 1) return "more than one Transfer-Encoding";
  if (te.size() != 7 || !std::equal(te.begin(), te.end(), "chunked", [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) == b;
      })) {
    return "Transfer-Encoding must be exactly 'chunked'";
  }
  if (cl_fields > 0) return "Transfer-Encoding together with Content-Length";
  return std::nullopt;
}

// Constant time in the key bytes: every key is scanned in full, the token is
// read as if zero-padded to the key's length, and a length mismatch is folded
// into the difference instead of returning early. Only the key lengths (fixed
// configuration) and the token's own length shape the timing.
// The matched index is selected with a mask, not a branch on the comparison.
int ApiKeyIndex(std::string_view authorization, const std::vector<std::string>& keys) {
  std::string_view v = Trim(authorization);
  if (v.size() < 7 || v[6] != ' ') return -1;
  for (size_t i = 0; i < 6; ++i) {
    if ((v[i] | 0x20) != "bearer"[i]) return -1;
  }
  return BareApiKeyIndex(v.substr(7), keys);
}

int BareApiKeyIndex(std::string_view bare, const std::vector<std::string>& keys) {
  const std::string_view token = Trim(bare);
  unsigned match = 0;
  unsigned index = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    const std::string& key = keys[k];
    if (key.empty()) continue;  // an empty key never matches
    unsigned diff = token.size() != key.size() ? 1u : 0u;
    for (size_t i = 0; i < key.size(); ++i) {
      const unsigned char t = i < token.size() ? static_cast<unsigned char>(token[i]) : 0;
      diff |= static_cast<unsigned char>(key[i]) ^ t;
    }
    const unsigned hit = diff == 0 ? 1u : 0u;
    const unsigned mask = 0u - (hit & ~match);  // all ones for the first matching key only
    index |= static_cast<unsigned>(k) & mask;
    match |= hit;
  }
  return match != 0 ? static_cast<int>(index) : -1;
}

// One TCP connection. Lives while an async operation or an HttpExchange holds
// it; all members are touched only on the connection's strand.
//
// Per request: Dispatch starts it (active_), a disconnect watcher read stays
// pending while the response is produced, and FinishRequest ends it once the
// handler is done (Send, EndStream or the exchange dropped) and every byte is
// written, or the client is gone. The watcher is cancelled before the next read.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, std::shared_ptr<HttpServerCore> core, bool counted)
      : stream_(std::move(socket)), core_(std::move(core)), counted_(counted) {
    if (counted_) core_->connections.fetch_add(1);
  }
  ~HttpSession() {
    if (counted_) core_->connections.fetch_sub(1);
  }

  void Start() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&HttpSession::DoRead, shared_from_this()));
  }
  // Answers 503 without reading a request, then closes (over max_connections).
  void Reject() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->linger_timeout_ = kRejectLingerTimeout;
      self->SendLocal({ApiStatus::kServiceUnavailable, "too many connections; retry later", "server_error", "",
                       "too_many_connections"});
    });
  }
  net::any_io_executor executor() { return stream_.get_executor(); }
  const HttpServerCore& core() const { return *core_; }

  // The handlers below are posted by HttpExchange; `seq` names the request so
  // calls for an earlier request are ignored.
  void OnSend(uint64_t seq, HttpResponse res, const std::string& request_id) {
    if (!active_ || seq != seq_ || handler_done_) return;
    handler_done_ = true;
    if (disconnected_) return MaybeFinish();
    Write(std::move(res), request_id);
  }

  void OnStartStream(uint64_t seq, HttpResponse head, const std::string& request_id) {
    if (!active_ || seq != seq_ || handler_done_ || disconnected_) return;
    streaming_ = true;
    head.set(http::field::server, "tessera");
    head.set("x-request-id", request_id);
    head.set(http::field::cache_control, "no-cache");
    head.body().clear();
    head.keep_alive(keep_alive_ && !core_->draining.load());
    head.erase(http::field::content_length);
    head.chunked(true);
    status_ = head.result_int();
    close_after_ = !head.keep_alive();
    request_id_ = request_id;
    std::ostringstream os;
    os << head.base();
    pending_ += os.str();
    Flush();
  }

  void OnChunk(uint64_t seq, const std::string& data) {
    if (!active_ || seq != seq_ || handler_done_ || disconnected_ || !streaming_) return;
    char size_line[32];
    std::snprintf(size_line, sizeof(size_line), "%zx\r\n", data.size());
    pending_ += size_line;
    pending_ += data;
    pending_ += "\r\n";
    pending_payload_ += data.size();
    Flush();
  }

  void OnEndStream(uint64_t seq) {
    if (!active_ || seq != seq_ || handler_done_) return;
    handler_done_ = true;
    // Not streaming here only when the client left before the head was sent.
    if (disconnected_ || !streaming_) return MaybeFinish();
    pending_ += "0\r\n\r\n";
    Flush();
  }

  // The exchange was destroyed before completing its response.
  void OnDropped(uint64_t seq, bool stream_started, const std::string& request_id) {
    if (!active_ || seq != seq_ || handler_done_) return;
    if (disconnected_) {
      handler_done_ = true;
      return MaybeFinish();
    }
    if (!stream_started) {
      LogError("http: request {} dropped without a response", request_id);
      return OnSend(seq, ErrorResponse({ApiStatus::kInternal, "internal error: request dropped",
                                        "server_error", "", "internal_error"}),
                    request_id);
    }
    // Mid-stream: a truncated chunked body (no terminator) tells the client.
    LogError("http: request {} dropped its stream without EndStream; closing", request_id);
    on_disconnect_.clear();
    handler_done_ = true;
    Disconnect("stream dropped by the server");
  }

  void OnDisconnectCallback(uint64_t seq, std::function<void()> fn) {
    if (seq == disconnected_seq_) return RunCallback(fn);
    if (active_ && seq == seq_) on_disconnect_.push_back(std::move(fn));
  }

  void AbortRequest(uint64_t seq, const std::string& reason) {
    if (active_ && seq == seq_) Disconnect(reason);
  }

 private:
  // The head first: its framing is checked before any body byte is read.
  void DoRead() {
    parser_.emplace();
    parser_->body_limit(core_->options.body_limit);
    parser_->header_limit(core_->options.header_limit);
    stream_.expires_after(core_->options.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&HttpSession::OnReadHeader, shared_from_this()));
  }

  void OnReadHeader(beast::error_code ec, std::size_t n) {
    if (ec) return OnRead(ec, n);
    if (std::optional<std::string> why = MessageFramingError(parser_->get(), parser_->get().version())) {
      // RFC 9112 section 6.3: an ambiguous body length is a 400 and the
      // connection is closed (the request-smuggling class).
      return SendLocal(BadRequest("malformed HTTP request: " + *why, "", "bad_request"));
    }
    if (parser_->is_done()) return OnRead(ec, n);
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&HttpSession::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout) return Close();
    if (ec == http::error::body_limit) {
      return SendLocal({ApiStatus::kPayloadTooLarge,
                        "request body exceeds the limit of " + std::to_string(core_->options.body_limit) + " bytes",
                        "invalid_request_error", "", "request_too_large"});
    }
    if (ec == http::error::header_limit) {
      return SendLocal({ApiStatus::kHeaderFieldsTooLarge,
                        "request line and headers exceed the limit of " +
                            std::to_string(core_->options.header_limit) + " bytes",
                        "invalid_request_error", "", "request_header_fields_too_large"});
    }
    if (ec == http::error::partial_message) return Close();
    if (IsHttpParseError(ec)) {
      return SendLocal(BadRequest("malformed HTTP request: " + ec.message(), "", "bad_request"));
    }
    if (ec) return Close();
    stream_.expires_never();  // the watcher read must not time out; writes set their own
    Dispatch(parser_->release());
  }

  void BeginRequest(std::string method, std::string target, bool keep_alive) {
    ++seq_;
    active_ = true;
    handler_done_ = false;
    disconnected_ = false;
    streaming_ = false;
    close_after_ = false;
    body_bytes_ = 0;
    method_ = std::move(method);
    target_ = std::move(target);
    keep_alive_ = keep_alive;
    start_ = std::chrono::steady_clock::now();
    core_->in_flight.fetch_add(1);
  }

  void Dispatch(HttpRequest req) {
    BeginRequest(std::string(req.method_string()), std::string(req.target()), req.keep_alive());
    const std::string path = PathOf(req.target());
    const http::verb method = req.method();
    std::string id = RequestIdFrom(req);
    request_id_ = id;
    auto ex = std::make_shared<HttpExchange>(shared_from_this(), std::move(req), std::move(id), seq_);
    exchange_ = ex;
    StartWatch();

    auto by_path = core_->routes.find(path);
    const HttpRoute* route = nullptr;
    if (by_path != core_->routes.end()) {
      auto it = by_path->second.find(method);
      if (it != by_path->second.end()) route = &it->second;
    } else {
      for (const HttpServerCore::PrefixRoute& p : core_->prefix_routes) {
        if (p.method == method && path.size() > p.prefix.size() && path.compare(0, p.prefix.size(), p.prefix) == 0) {
          route = &p.route;
          break;
        }
      }
    }
    HttpResponse (*const error_response)(const ApiError&) =
        route && route->options.error_response ? route->options.error_response : ErrorResponse;
    // Authentication first, so unauthenticated clients learn nothing about routes.
    if (!core_->options.api_keys.empty() && !(route && route->options.public_route)) {
      // Bearer, or else Anthropic's x-api-key.
      auto auth = ex->request().find(http::field::authorization);
      auto x_key = ex->request().find("x-api-key");
      int key = -1;
      if (auth != ex->request().end()) {
        key = ApiKeyIndex(std::string_view(auth->value().data(), auth->value().size()), core_->options.api_keys);
      } else if (x_key != ex->request().end()) {
        key = BareApiKeyIndex(std::string_view(x_key->value().data(), x_key->value().size()),
                              core_->options.api_keys);
      }
      if (key < 0) {
        HttpResponse res = error_response({ApiStatus::kUnauthorized, "invalid or missing API key",
                                           "authentication_error", "", "invalid_api_key"});
        res.set(http::field::www_authenticate, "Bearer");
        return ex->Send(std::move(res));
      }
      ex->tenant_ = core_->api_key_tenants[static_cast<size_t>(key)];
    }
    if (core_->draining.load() && !(route && route->options.serve_while_draining)) {
      HttpResponse res = error_response(
          {ApiStatus::kServiceUnavailable, "server is shutting down", "server_error", "", "shutting_down"});
      res.set(http::field::retry_after, "5");
      return ex->Send(std::move(res));  // Write adds Connection: close while draining
    }
    if (by_path == core_->routes.end() && route == nullptr) {
      return ex->Send(ErrorResponse({ApiStatus::kNotFound, "no route for " + method_ + " " + path,
                                     "invalid_request_error", "", "not_found"}));
    }
    if (!route) {
      std::string allow;
      for (const auto& [verb, unused] : by_path->second) {
        allow += (allow.empty() ? "" : ", ") + std::string(http::to_string(verb));
      }
      HttpResponse res = ErrorResponse({ApiStatus::kMethodNotAllowed,
                                        "method " + method_ + " is not allowed on " + path + " (allowed: " + allow + ")",
                                        "invalid_request_error", "", "method_not_allowed"});
      res.set(http::field::allow, allow);
      return ex->Send(std::move(res));
    }
    if (route->options.json_body) {
      auto ct = ex->request().find(http::field::content_type);
      const std::string_view value =
          ct == ex->request().end() ? std::string_view() : std::string_view(ct->value().data(), ct->value().size());
      if (!IsJsonContentType(value)) {
        const std::string got = value.empty() ? "none" : "'" + std::string(value.substr(0, 64)) + "'";
        return ex->Send(error_response({ApiStatus::kUnsupportedMediaType,
                                       "Content-Type must be application/json, got " + got,
                                       "invalid_request_error", "", "unsupported_media_type"}));
      }
    }
    try {
      route->handler(ex);
    } catch (const std::exception& e) {
      LogError("http: handler for {} {} threw: {}", method_, path, e.what());
      ex->Send(ErrorResponse({ApiStatus::kInternal, "internal error", "server_error", "", "internal_error"}));
    }
  }

  // Answers a request that could not be parsed (or a rejected connection),
  // then closes the connection. No exchange and no watcher are involved.
  void SendLocal(const ApiError& error) {
    std::string id = RandomHex(32);
    std::string method = "-", target = "-";
    // Fields parsed before the error are available even when the head is incomplete.
    if (parser_ && !parser_->get().method_string().empty()) {
      method = std::string(parser_->get().method_string());
      target = std::string(parser_->get().target());
      id = RequestIdFrom(parser_->get());
    }
    BeginRequest(std::move(method), std::move(target), /*keep_alive=*/false);
    handler_done_ = true;
    Write(ErrorResponse(error), id);
  }

  // Writes a complete response to the current request.
  void Write(HttpResponse res, const std::string& request_id) {
    res.set(http::field::server, "tessera");
    res.set("x-request-id", request_id);
    res.keep_alive(keep_alive_ && !core_->draining.load());
    res.prepare_payload();
    status_ = res.result_int();
    close_after_ = !res.keep_alive();
    request_id_ = request_id;
    out_ = std::make_shared<HttpResponse>(std::move(res));
    writing_active_ = true;
    stream_.expires_after(core_->options.write_timeout);
    http::async_write(stream_, *out_, beast::bind_front_handler(&HttpSession::OnWrite, shared_from_this()));
  }

  void OnWrite(beast::error_code ec, std::size_t) {
    writing_active_ = false;
    out_.reset();
    if (ec) return Disconnect(ec == beast::error::timeout ? "write timeout" : ec.message());
    MaybeFinish();
  }

  // Hands all queued stream bytes to one write (one write in flight at a time).
  void Flush() {
    if (writing_active_ || pending_.empty() || disconnected_) return;
    writing_.swap(pending_);
    pending_.clear();
    writing_payload_ = pending_payload_;
    pending_payload_ = 0;
    writing_active_ = true;
    stream_.expires_after(core_->options.write_timeout);
    net::async_write(stream_, net::buffer(writing_),
                     beast::bind_front_handler(&HttpSession::OnStreamWrite, shared_from_this()));
  }

  void OnStreamWrite(beast::error_code ec, std::size_t) {
    writing_active_ = false;
    if (auto ex = exchange_.lock()) ex->unwritten_.fetch_sub(writing_payload_);
    if (!ec) body_bytes_ += writing_payload_;
    writing_.clear();
    writing_payload_ = 0;
    if (ec) return Disconnect(ec == beast::error::timeout ? "write timeout" : ec.message());
    if (!pending_.empty()) return Flush();
    MaybeFinish();
  }

  // The client is gone: closes the socket (aborting pending I/O) and runs the
  // disconnect callbacks once.
  void Disconnect(const std::string& reason) {
    if (!active_ || disconnected_) return;
    disconnected_ = true;
    disconnected_seq_ = seq_;
    disconnect_reason_ = reason;
    if (auto ex = exchange_.lock()) ex->closed_.store(true, std::memory_order_release);
    std::vector<std::function<void()>> fns;
    fns.swap(on_disconnect_);
    pending_.clear();
    Close();
    for (const auto& fn : fns) RunCallback(fn);
    MaybeFinish();
  }

  void MaybeFinish() {
    if (!active_ || !handler_done_) return;
    if (!disconnected_ && (writing_active_ || !pending_.empty())) return;
    FinishRequest();
  }

  void FinishRequest() {
    active_ = false;
    core_->in_flight.fetch_sub(1);
    on_disconnect_.clear();
    exchange_.reset();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    if (disconnected_) {
      LogInfo("http: {} {} client disconnected ({}) {:.1f}ms sent={} id={}", method_, target_,
              disconnect_reason_, ms, body_bytes_, request_id_);
      return;  // the socket is closed
    }
    const bool probe = method_ == "GET" && (target_ == "/health" || target_ == "/ready");
    if (streaming_) {
      LogInfo("http: {} {} {} stream {:.1f}ms sent={} id={}", method_, target_, status_, ms, body_bytes_,
              request_id_);
    } else {
      LogAt(probe ? LogLevel::kDebug : LogLevel::kInfo, "http: {} {} {} {:.1f}ms id={}", method_, target_,
            status_, ms, request_id_);
    }
    StopWatch(close_after_ ? After::kLinger : After::kRead);
  }

  // Disconnect watcher: a read kept pending while a request is answered. EOF
  // or an error means the client left; bytes are a pipelined next request and
  // go to buffer_ for the next parse.
  void StartWatch() {
    if (watching_ || disconnected_ || buffer_.size() >= kWatchBufferLimit) return;
    watching_ = true;
    stream_.async_read_some(net::buffer(scratch_.data(), std::min(scratch_.size(), kWatchBufferLimit - buffer_.size())),
                            beast::bind_front_handler(&HttpSession::OnWatch, shared_from_this()));
  }

  void OnWatch(beast::error_code ec, std::size_t n) {
    watching_ = false;
    if (n > 0) {
      net::buffer_copy(buffer_.prepare(n), net::buffer(scratch_.data(), n));
      buffer_.commit(n);
    }
    if (watch_stop_) {
      watch_stop_ = false;
      if (ec == net::error::eof) peer_closed_ = true;
      return Continue(after_watch_);
    }
    if (!active_) return;
    if (ec && handler_done_ && (writing_active_ || !pending_.empty())) {
      // The whole response is written or being written: a client that closes
      // after reading it has not abandoned the request. A failed write still
      // reports a disconnect; once the write is done the socket is closed
      // (not read again: the peer's EOF has been consumed here).
      peer_closed_ = true;
      return;
    }
    if (ec) return Disconnect(ec == net::error::eof ? "client closed the connection" : ec.message());
    StartWatch();
  }

  enum class After { kRead, kLinger };

  // Ends the watcher (cancelling its read), then continues with `next`.
  void StopWatch(After next) {
    if (!watching_) return Continue(next);
    watch_stop_ = true;
    after_watch_ = next;
    beast::error_code ec;
    stream_.socket().cancel(ec);  // no write is pending here
  }

  void Continue(After next) {
    if (peer_closed_) return Close();  // nothing more can arrive: release the socket now
    if (next == After::kRead) return DoRead();
    LingeringClose();
  }

  // Half-closes, then reads and discards what the client still sends (e.g. the
  // rest of an oversize body) so it sees our response instead of a reset.
  void LingeringClose() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(linger_timeout_);
    DoDiscard();
  }
  void DoDiscard() {
    stream_.async_read_some(net::buffer(scratch_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      self->discarded_ += n;
      if (ec || self->discarded_ > kLingerMaxBytes) return self->Close();
      self->DoDiscard();
    });
  }
  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::shared_ptr<HttpServerCore> core_;
  const bool counted_;  // counted in core_->connections
  std::optional<http::request_parser<http::string_body>> parser_;

  // The request being answered (one at a time per connection).
  uint64_t seq_ = 0;
  uint64_t disconnected_seq_ = 0;  // the request whose client left, if any
  bool active_ = false;            // dispatched and not finished
  bool handler_done_ = false;      // Send/EndStream processed or exchange dropped
  bool disconnected_ = false;
  bool streaming_ = false;
  bool keep_alive_ = false;
  bool close_after_ = false;  // the response says Connection: close
  std::weak_ptr<HttpExchange> exchange_;
  std::vector<std::function<void()>> on_disconnect_;
  std::string method_, target_, request_id_, disconnect_reason_;
  unsigned status_ = 0;
  uint64_t body_bytes_ = 0;  // stream payload bytes written
  std::chrono::steady_clock::time_point start_;

  // Output: a complete response, or framed stream bytes.
  bool writing_active_ = false;
  std::shared_ptr<HttpResponse> out_;
  std::string pending_;  // queued, not yet handed to a write
  uint64_t pending_payload_ = 0;
  std::string writing_;  // the write in flight
  uint64_t writing_payload_ = 0;

  bool watching_ = false;
  bool watch_stop_ = false;
  bool peer_closed_ = false;  // the watcher saw the client's EOF
  After after_watch_ = After::kRead;
  std::array<char, 16384> scratch_;  // watcher and lingering-close reads (never both)
  std::chrono::seconds linger_timeout_ = kLingerTimeout;
  uint64_t discarded_ = 0;
};

HttpExchange::HttpExchange(std::shared_ptr<HttpSession> session, HttpRequest request, std::string request_id,
                           uint64_t seq)
    : session_(std::move(session)), request_(std::move(request)), request_id_(std::move(request_id)), seq_(seq) {}

HttpExchange::~HttpExchange() {
  if (ended_.load() || session_->core().stopped.load()) return;
  net::post(session_->executor(), [s = session_, seq = seq_, stream = streaming_.load(), id = request_id_] {
    s->OnDropped(seq, stream, id);
  });
}

void HttpExchange::Send(HttpResponse response) {
  if (responded_.exchange(true) || session_->core().stopped.load()) return;
  ended_.store(true);
  closed_.store(true, std::memory_order_release);
  net::post(session_->executor(), [s = session_, seq = seq_, r = std::move(response), id = request_id_]() mutable {
    s->OnSend(seq, std::move(r), id);
  });
}

void HttpExchange::StartStream(HttpResponse head) {
  if (responded_.exchange(true) || session_->core().stopped.load()) return;
  streaming_.store(true);
  net::post(session_->executor(), [s = session_, seq = seq_, h = std::move(head), id = request_id_]() mutable {
    s->OnStartStream(seq, std::move(h), id);
  });
}

void HttpExchange::WriteChunk(std::string data) {
  if (data.empty() || !streaming_.load() || ended_.load() || closed() || session_->core().stopped.load()) return;
  const uint64_t queued = unwritten_.fetch_add(data.size()) + data.size();
  if (queued > session_->core().options.stream_buffer_limit) {
    closed_.store(true, std::memory_order_release);
    net::post(session_->executor(), [s = session_, seq = seq_] {
      s->AbortRequest(seq, "stream buffer limit exceeded (client not reading)");
    });
    return;
  }
  net::post(session_->executor(), [s = session_, seq = seq_, d = std::move(data)] { s->OnChunk(seq, d); });
}

void HttpExchange::EndStream() {
  if (!streaming_.load() || ended_.exchange(true) || session_->core().stopped.load()) return;
  closed_.store(true, std::memory_order_release);
  net::post(session_->executor(), [s = session_, seq = seq_] { s->OnEndStream(seq); });
}

void HttpExchange::OnDisconnect(std::function<void()> fn) {
  if (!fn || session_->core().stopped.load()) return;
  net::post(session_->executor(),
            [s = session_, seq = seq_, fn = std::move(fn)]() mutable { s->OnDisconnectCallback(seq, std::move(fn)); });
}

void HttpExchange::Post(std::function<void()> fn) {
  if (session_->core().stopped.load()) return;
  net::post(session_->executor(), [s = session_, fn = std::move(fn)] { fn(); });
}

HttpServer::HttpServer(net::io_context& ioc, HttpServerOptions options)
    : ioc_(ioc), core_(std::make_shared<HttpServerCore>()), acceptor_(net::make_strand(ioc)) {
  core_->options = std::move(options);
  for (const std::string& key : core_->options.api_keys) core_->api_key_tenants.push_back(ApiKeyTenantId(key));
}

HttpServer::~HttpServer() = default;

void HttpServer::Handle(http::verb method, const std::string& path, HttpHandler handler, RouteOptions opts) {
  core_->routes[path][method] = HttpRoute{std::move(handler), opts};
}

void HttpServer::HandlePrefix(http::verb method, const std::string& prefix, HttpHandler handler, RouteOptions opts) {
  core_->prefix_routes.push_back({method, prefix, HttpRoute{std::move(handler), opts}});
}

std::string HttpExchange::path() const { return PathOf(request_.target()); }

std::string PercentDecode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
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
      LogWarn("http: accept failed: {}", ec.message());
      auto timer = std::make_shared<net::steady_timer>(acceptor_.get_executor(), std::chrono::milliseconds(100));
      timer->async_wait([this, timer](beast::error_code) {
        if (acceptor_.is_open()) DoAccept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    // Over the limit: answer 503 right away without reading the request (the
    // client reads it after sending), then a short lingering close. Rejected
    // connections are not counted.
    const bool over = core_->connections.load() >= core_->options.max_connections;
    auto session = std::make_shared<HttpSession>(std::move(socket), core_, /*counted=*/!over);
    if (over) {
      LogWarn("http: {} connections open (max_connections); rejecting a new one", core_->connections.load());
      session->Reject();
    } else {
      session->Start();
    }
    DoAccept();
  });
}

void HttpServer::BeginDrain() { core_->draining.store(true); }

void HttpServer::StopAccepting() {
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ec;
    acceptor_.close(ec);
  });
}

}  // namespace tessera
