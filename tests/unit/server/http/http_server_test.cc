// HttpServer over real loopback sockets: the server runs on 2 io threads, the
// clients are blocking POSIX sockets whose every read has a deadline.
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

namespace tessera {
namespace {

namespace http = boost::beast::http;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ClientResponse = http::response<http::string_body>;

// Polls `pred` until it holds or `timeout` passes.
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout = 5000ms) {
  const auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// A blocking client; every read waits at most until a deadline.
class Client {
 public:
  explicit Client(int port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~Client() { Close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads what arrives before the deadline into buf_; false on EOF/error/timeout.
  bool ReadSome(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  // One full response (chunked bodies decoded), or nullopt on timeout/EOF.
  std::optional<ClientResponse> Read(std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = Clock::now() + timeout;
    http::response_parser<http::string_body> parser;
    parser.eager(true);
    parser.body_limit(64 << 20);
    while (!parser.is_done()) {
      if (!buf_.empty()) {
        boost::beast::error_code ec;
        const size_t used = parser.put(boost::asio::buffer(buf_), ec);
        buf_.erase(0, used);
        if (ec && ec != http::error::need_more) return std::nullopt;
        if (parser.is_done()) break;
        if (used > 0 && !ec) continue;
      }
      if (!ReadSome(deadline)) return std::nullopt;
    }
    return parser.release();
  }

  // Reads until `needle` was received (kept in buf_); false on timeout/EOF.
  bool ReadUntil(const std::string& needle, std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = Clock::now() + timeout;
    while (buf_.find(needle) == std::string::npos) {
      if (!ReadSome(deadline)) return false;
    }
    return true;
  }

  // True when the server closes the connection before the deadline.
  bool WaitClosed(std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = Clock::now() + timeout;
    while (!eof_) {
      if (!ReadSome(deadline) && !eof_) return false;
    }
    return true;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

std::string Get(const std::string& target, const std::string& extra_headers = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: test\r\n" + extra_headers + "\r\n";
}

HttpHandler Reply(std::string body) {
  return [body](std::shared_ptr<HttpExchange> ex) {
    HttpResponse res{HttpStatus::ok, 11};
    res.body() = body;
    ex->Send(std::move(res));
  };
}

RouteOptions Exempt() {
  RouteOptions o;
  o.serve_while_draining = true;
  return o;
}
RouteOptions Public() {
  RouteOptions o;
  o.public_route = true;
  return o;
}

// State shared with handlers and callbacks, which may run after a test body
// returns (so never capture the body's locals by reference).
struct Shared {
  std::atomic<int> fired{0};
  std::atomic<uint64_t> produced{0};
  std::mutex mu;
  std::shared_ptr<HttpExchange> held;

  void Hold(std::shared_ptr<HttpExchange> ex) {
    std::lock_guard<std::mutex> lock(mu);
    held = std::move(ex);
  }
  std::shared_ptr<HttpExchange> Take() {
    std::lock_guard<std::mutex> lock(mu);
    return std::move(held);
  }
  bool holding() {
    std::lock_guard<std::mutex> lock(mu);
    return held != nullptr;
  }
};

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options, const std::function<void(HttpServer&)>& routes) {
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<HttpServer>(ioc_, std::move(options));
    routes(*server_);
    ASSERT_TRUE(server_->Listen().ok());
    server_->Start();
    for (int i = 0; i < 2; ++i) io_threads_.emplace_back([this] { ioc_.run(); });
  }
  // Background work of a handler; joined before the server stops.
  void Spawn(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    workers_.emplace_back(std::move(fn));
  }
  void TearDown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& t : workers_) t.join();
      workers_.clear();
    }
    ioc_.stop();
    for (auto& t : io_threads_) t.join();
    if (server_) server_->MarkStopped();
    server_.reset();
  }
  int port() const { return server_->port(); }

  boost::asio::io_context ioc_{2};
  std::unique_ptr<HttpServer> server_;
  std::vector<std::thread> io_threads_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
};

TEST_F(HttpServerTest, StreamsChunksInOrderAndKeepsAlive) {
  StartServer({}, [this](HttpServer& s) {
    s.Handle(http::verb::get, "/stream", [this](std::shared_ptr<HttpExchange> ex) {
      HttpResponse head{HttpStatus::ok, 11};
      head.set(http::field::content_type, "text/event-stream");
      ex->StartStream(std::move(head));
      Spawn([ex] {
        for (int i = 0; i < 3; ++i) {
          std::this_thread::sleep_for(30ms);
          ex->WriteChunk("data: " + std::to_string(i) + "\n\n");
        }
        ex->WriteChunk("");  // ignored
        ex->EndStream();
        EXPECT_TRUE(ex->closed());
      });
    });
    s.Handle(http::verb::get, "/health", Reply("{}"));
  });
  Client c(port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send(Get("/stream")));
  auto res = c.Read();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->result_int(), 200);
  EXPECT_TRUE(res->chunked());
  EXPECT_EQ((*res)[http::field::content_type], "text/event-stream");
  EXPECT_EQ((*res)[http::field::cache_control], "no-cache");
  EXPECT_FALSE((*res)["x-request-id"].empty());
  EXPECT_EQ(res->body(), "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  EXPECT_TRUE(res->keep_alive());
  // The same connection serves the next request.
  ASSERT_TRUE(c.Send(Get("/health")));
  auto second = c.Read();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->result_int(), 200);
  EXPECT_EQ(second->body(), "{}");
  EXPECT_TRUE(WaitFor([&] { return server_->in_flight() == 0; }));
}

TEST_F(HttpServerTest, OnDisconnectFiresWhenClientLeavesMidStream) {
  auto st = std::make_shared<Shared>();
  StartServer({}, [st](HttpServer& s) {
    s.Handle(http::verb::get, "/stream", [st](std::shared_ptr<HttpExchange> ex) {
      HttpResponse head{HttpStatus::ok, 11};
      head.set(http::field::content_type, "text/event-stream");
      ex->StartStream(std::move(head));
      ex->WriteChunk("data: first\n\n");
      ex->OnDisconnect([st] { st->fired.fetch_add(1); });
      st->Hold(ex);
    });
  });
  {
    Client c(port());
    ASSERT_TRUE(c.Send(Get("/stream")));
    ASSERT_TRUE(c.ReadUntil("data: first"));
  }  // closes mid-stream
  ASSERT_TRUE(WaitFor([&] { return st->fired.load() == 1; }));
  std::shared_ptr<HttpExchange> ex = st->Take();
  ASSERT_TRUE(ex);
  EXPECT_TRUE(ex->closed());
  ex->WriteChunk("data: late\n\n");  // no-ops once the client is gone
  // A callback registered after the disconnect runs too, once.
  ex->OnDisconnect([st] { st->fired.fetch_add(10); });
  ASSERT_TRUE(WaitFor([&] { return st->fired.load() == 11; }));
  ex->EndStream();
  ex.reset();
  EXPECT_TRUE(WaitFor([&] { return server_->in_flight() == 0; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(st->fired.load(), 11);
}

TEST_F(HttpServerTest, OnDisconnectFiresWhileHandlerPendingAndLateSendIsSafe) {
  auto st = std::make_shared<Shared>();
  StartServer({}, [st](HttpServer& s) {
    s.Handle(http::verb::post, "/slow", [st](std::shared_ptr<HttpExchange> ex) {
      ex->OnDisconnect([st] { st->fired.fetch_add(1); });
      st->Hold(ex);
    });
    s.Handle(http::verb::get, "/health", Reply("ok"));
  });
  {
    Client c(port());
    ASSERT_TRUE(c.Send("POST /slow HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"));
    ASSERT_TRUE(WaitFor([&] { return st->holding(); }));
  }
  ASSERT_TRUE(WaitFor([&] { return st->fired.load() == 1; }));
  std::shared_ptr<HttpExchange> ex = st->Take();
  ASSERT_TRUE(ex);
  EXPECT_TRUE(ex->closed());
  EXPECT_EQ(server_->in_flight(), 1);  // the handler still owns the request
  ex->Send(JsonResponse(HttpStatus::ok, {{"late", true}}));
  ex.reset();
  EXPECT_TRUE(WaitFor([&] { return server_->in_flight() == 0; }));
  Client other(port());
  ASSERT_TRUE(other.Send(Get("/health")));
  auto res = other.Read();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->result_int(), 200);
  EXPECT_EQ(st->fired.load(), 1);
}

TEST_F(HttpServerTest, PipelinedRequestIsAnsweredAfterThePendingOne) {
  StartServer({}, [this](HttpServer& s) {
    s.Handle(http::verb::get, "/slow", [this](std::shared_ptr<HttpExchange> ex) {
      Spawn([ex] {
        std::this_thread::sleep_for(150ms);
        HttpResponse res{HttpStatus::ok, 11};
        res.body() = "slow";
        ex->Send(std::move(res));
      });
    });
    s.Handle(http::verb::get, "/fast", Reply("fast"));
  });
  Client c(port());
  // The second request arrives while the first is pending (watcher path).
  ASSERT_TRUE(c.Send(Get("/slow")));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(c.Send(Get("/fast")));
  auto first = c.Read();
  auto second = c.Read();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(first->body(), "slow");
  EXPECT_EQ(second->body(), "fast");
  // Both in one segment (parser buffer path).
  ASSERT_TRUE(c.Send(Get("/slow") + Get("/fast")));
  first = c.Read();
  second = c.Read();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(first->body(), "slow");
  EXPECT_EQ(second->body(), "fast");
}

TEST_F(HttpServerTest, DrainingRejectsNormalRoutesAndServesExemptOnes) {
  StartServer({}, [](HttpServer& s) {
    s.Handle(http::verb::get, "/v1/models", Reply("models"));
    s.Handle(http::verb::get, "/health", Reply("ok"), Exempt());
  });
  server_->BeginDrain();
  {
    Client c(port());
    ASSERT_TRUE(c.Send(Get("/v1/models")));
    auto res = c.Read();
    ASSERT_TRUE(res.has_value());
    EXPECT_EQ(res->result_int(), 503);
    EXPECT_EQ((*res)[http::field::retry_after], "5");
    EXPECT_FALSE(res->keep_alive());
    EXPECT_NE(res->body().find("\"code\":\"shutting_down\""), std::string::npos);
    EXPECT_NE(res->body().find("server is shutting down"), std::string::npos);
    EXPECT_TRUE(c.WaitClosed());
  }
  {
    Client c(port());
    ASSERT_TRUE(c.Send(Get("/health")));
    auto res = c.Read();
    ASSERT_TRUE(res.has_value());
    EXPECT_EQ(res->result_int(), 200);
    EXPECT_EQ(res->body(), "ok");
  }
  server_->StopAccepting();
  EXPECT_TRUE(WaitFor([&] {
    Client c(port());
    return !c.connected() || (c.Send(Get("/health")) && !c.Read(500ms).has_value());
  }));
}

TEST_F(HttpServerTest, ApiKeysGuardNonPublicRoutes) {
  HttpServerOptions o;
  o.api_keys = {"sk-first", "sk-second-key"};
  StartServer(o, [](HttpServer& s) {
    s.Handle(http::verb::get, "/v1/models", Reply("models"));
    s.Handle(http::verb::get, "/health", Reply("ok"), Public());
  });
  auto request = [&](const std::string& target, const std::string& headers) {
    Client c(port());
    EXPECT_TRUE(c.Send(Get(target, headers)));
    auto res = c.Read();
    EXPECT_TRUE(res.has_value());
    return res.value_or(ClientResponse{});
  };
  for (const std::string& h : {std::string(), std::string("Authorization: Bearer sk-wrong\r\n"),
                               std::string("Authorization: Bearer sk-firs\r\n"),
                               std::string("Authorization: Basic sk-first\r\n")}) {
    ClientResponse res = request("/v1/models", h);
    EXPECT_EQ(res.result_int(), 401) << h;
    EXPECT_EQ(res[http::field::www_authenticate], "Bearer");
    EXPECT_NE(res.body().find("\"code\":\"invalid_api_key\""), std::string::npos);
    EXPECT_NE(res.body().find("\"type\":\"authentication_error\""), std::string::npos);
  }
  EXPECT_EQ(request("/v1/models", "Authorization: Bearer sk-first\r\n").body(), "models");
  EXPECT_EQ(request("/v1/models", "Authorization: bearer sk-second-key\r\n").result_int(), 200);
  EXPECT_EQ(request("/health", "").result_int(), 200);
  EXPECT_EQ(request("/nowhere", "").result_int(), 401);
  EXPECT_EQ(request("/nowhere", "Authorization: Bearer sk-first\r\n").result_int(), 404);
  // Anthropic's header, read only when there is no Authorization header.
  EXPECT_EQ(request("/v1/models", "x-api-key: sk-second-key\r\n").body(), "models");
  EXPECT_EQ(request("/v1/models", "x-api-key: sk-second\r\n").result_int(), 401);
  EXPECT_EQ(request("/v1/models", "Authorization: Bearer sk-wrong\r\nx-api-key: sk-first\r\n").result_int(), 401);
}

// A route's error_response shapes the server's own refusals on it.
TEST_F(HttpServerTest, RouteErrorShapeAppliesToTheServersOwnRefusals) {
  HttpServerOptions o;
  o.api_keys = {"sk-first"};
  RouteOptions shaped{.json_body = true, .error_response = AnthropicErrorResponse};
  StartServer(o, [&](HttpServer& s) { s.Handle(http::verb::post, "/v1/messages", Reply("ok"), shaped); });
  Client c(port());
  ASSERT_TRUE(c.Send("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"));
  auto res = c.Read();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->result_int(), 401);
  EXPECT_EQ(res->body(), R"({"error":{"message":"invalid or missing API key","type":"authentication_error"},"type":"error"})");
  Client d(port());
  ASSERT_TRUE(d.Send("POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-first\r\nContent-Length: 2\r\n\r\n{}"));
  res = d.Read();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->result_int(), 415);
  EXPECT_NE(res->body().find(R"("type":"error")"), std::string::npos) << res->body();
}

// RFC 9112 sections 6.1 and 6.3: a body length that two parsers could read
// differently is a 400 and the connection closes, so a request smuggled in
// the body is never served.
TEST_F(HttpServerTest, AmbiguousBodyFramingIs400AndCloses) {
  auto hits = std::make_shared<std::atomic<int>>(0);
  StartServer({}, [hits](HttpServer& s) {
    s.Handle(http::verb::post, "/echo", [hits](std::shared_ptr<HttpExchange> ex) {
      ++*hits;
      HttpResponse res{HttpStatus::ok, 11};
      res.body() = "got " + ex->request().body();
      ex->Send(std::move(res));
    });
    s.Handle(http::verb::get, "/secret", Reply("secret"));
  });
  const std::string smuggled = "GET /secret HTTP/1.1\r\nHost: test\r\n\r\n";
  const std::string chunked_body = "5\r\nhello\r\n0\r\n\r\n";
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"Transfer-Encoding: gzip\r\nContent-Length: " + std::to_string(smuggled.size()) + "\r\n", smuggled},
      {"Content-Length: " + std::to_string(smuggled.size()) + "\r\nTransfer-Encoding: gzip\r\n", smuggled},
      {"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", chunked_body},
      {"Transfer-Encoding: gzip, chunked\r\n", chunked_body},
      {"Transfer-Encoding: chunked, identity\r\n", chunked_body},
      {"Transfer-Encoding: identity\r\n", smuggled},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", chunked_body},
      {"Content-Length: 5\r\nContent-Length: 5\r\n", "hello"},
      {"Content-Length: 5, 5\r\n", "hello"},
      {"Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"},
      {"Content-Length: +5\r\n", "hello"},
  };
  for (const auto& [headers, body] : refused) {
    Client c(port());
    ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: test\r\n" + headers + "\r\n" + body));
    auto res = c.Read();
    ASSERT_TRUE(res.has_value()) << headers;
    EXPECT_EQ(res->result_int(), 400) << headers;
    EXPECT_NE(res->body().find("malformed HTTP request"), std::string::npos) << res->body();
    EXPECT_TRUE(c.WaitClosed()) << headers;
  }
  {  // HTTP/1.0 knows no Transfer-Encoding.
    Client c(port());
    ASSERT_TRUE(c.Send("POST /echo HTTP/1.0\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked_body));
    auto res = c.Read();
    ASSERT_TRUE(res.has_value());
    EXPECT_EQ(res->result_int(), 400);
  }
  EXPECT_EQ(hits->load(), 0);
  // Unambiguous framings still work, on one keep-alive connection.
  Client c(port());
  for (const std::string& te : {std::string("chunked"), std::string("Chunked"), std::string(" chunked ")}) {
    ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding:" + te + "\r\n\r\n" + chunked_body));
    auto res = c.Read();
    ASSERT_TRUE(res.has_value()) << te;
    EXPECT_EQ(res->result_int(), 200) << te;
    EXPECT_EQ(res->body(), "got hello");
  }
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello"));
  auto res = c.Read();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->body(), "got hello");
  EXPECT_EQ(hits->load(), 4);
}

TEST(HttpServerApiKey, MatchesOnlyExactBearerTokens) {
  const std::vector<std::string> keys = {"abc", "longer-key"};
  EXPECT_TRUE(ApiKeyMatches("Bearer abc", keys));
  EXPECT_TRUE(ApiKeyMatches("  BEARER   longer-key ", keys));
  EXPECT_FALSE(ApiKeyMatches("Bearer ab", keys));
  EXPECT_FALSE(ApiKeyMatches("Bearer abcd", keys));
  EXPECT_FALSE(ApiKeyMatches("Bearer abd", keys));
  EXPECT_FALSE(ApiKeyMatches("Bearer ", keys));
  EXPECT_FALSE(ApiKeyMatches("abc", keys));
  EXPECT_FALSE(ApiKeyMatches("Bearerabc", keys));
  EXPECT_FALSE(ApiKeyMatches("Bearer abc", {}));
  EXPECT_FALSE(ApiKeyMatches("Bearer ", {""}));
  // Which key matched (--cache-isolation api-key namespaces by it).
  EXPECT_EQ(ApiKeyIndex("Bearer abc", keys), 0);
  EXPECT_EQ(ApiKeyIndex("Bearer longer-key", keys), 1);
  EXPECT_EQ(ApiKeyIndex("Bearer nope", keys), -1);
  EXPECT_EQ(ApiKeyIndex("Bearer k", {"", "x", "k", "k"}), 2);  // the first match
  EXPECT_EQ(BareApiKeyIndex(" longer-key ", keys), 1);
  EXPECT_EQ(BareApiKeyIndex("Bearer abc", keys), -1);
  EXPECT_EQ(BareApiKeyIndex("", {""}), -1);
}

TEST_F(HttpServerTest, ConnectionsBeyondTheLimitGet503) {
  HttpServerOptions o;
  o.max_connections = 2;
  StartServer(o, [](HttpServer& s) { s.Handle(http::verb::get, "/health", Reply("ok")); });
  auto a = std::make_unique<Client>(port());
  Client b(port());
  for (Client* c : {a.get(), &b}) {
    ASSERT_TRUE(c->Send(Get("/health")));
    ASSERT_TRUE(c->Read().has_value());
  }
  {
    Client over(port());
    over.Send(Get("/health"));
    auto res = over.Read();
    if (res) {
      EXPECT_EQ(res->result_int(), 503);
      EXPECT_NE(res->body().find("too_many_connections"), std::string::npos);
      EXPECT_FALSE(res->keep_alive());
    }
    EXPECT_TRUE(over.WaitClosed());
  }
  a.reset();
  ASSERT_TRUE(WaitFor([&] { return server_->connections() < 2; }));
  Client again(port());
  ASSERT_TRUE(again.Send(Get("/health")));
  auto res = again.Read();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->result_int(), 200);
}

TEST_F(HttpServerTest, SlowReaderHitsTheBufferLimitAndServerStaysResponsive) {
  auto st = std::make_shared<Shared>();
  StartServer({}, [this, st](HttpServer& s) {
    s.Handle(http::verb::get, "/flood", [this, st](std::shared_ptr<HttpExchange> ex) {
      ex->OnDisconnect([st] { st->fired.fetch_add(1); });
      ex->StartStream(HttpResponse{HttpStatus::ok, 11});
      Spawn([ex, st] {
        const std::string chunk(64 * 1024, 'x');
        for (int i = 0; i < 320 && !ex->closed(); ++i) {  // 20 MiB
          ex->WriteChunk(chunk);
          st->produced.fetch_add(chunk.size());
          // Paced so the socket buffers fill first: the limit trips because
          // the client does not read, not because the producer outruns the io.
          std::this_thread::sleep_for(1ms);
        }
        ex->EndStream();
      });
    });
    s.Handle(http::verb::get, "/health", Reply("ok"));
  });
  Client slow(port(), /*rcvbuf=*/4096);
  ASSERT_TRUE(slow.Send(Get("/flood")));  // and never reads
  ASSERT_TRUE(WaitFor([&] { return st->fired.load() == 1; }, 10000ms));
  Client other(port());
  ASSERT_TRUE(other.Send(Get("/health")));
  auto res = other.Read();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->result_int(), 200);
  EXPECT_TRUE(WaitFor([&] { return server_->in_flight() == 0; }));
  EXPECT_LE(st->produced.load(), 20ull << 20);
}

TEST_F(HttpServerTest, DroppedExchangeAnswers500) {
  StartServer({}, [](HttpServer& s) { s.Handle(http::verb::get, "/drop", [](std::shared_ptr<HttpExchange>) {}); });
  Client c(port());
  ASSERT_TRUE(c.Send(Get("/drop")));
  auto res = c.Read();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->result_int(), 500);
}

TEST_F(HttpServerTest, ManyConcurrentConnections) {
  StartServer({}, [](HttpServer& s) { s.Handle(http::verb::get, "/health", Reply("ok")); });
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 200; ++i) {
    clients.push_back(std::make_unique<Client>(port()));
    ASSERT_TRUE(clients.back()->connected());
  }
  for (auto& c : clients) ASSERT_TRUE(c->Send(Get("/health")));
  for (auto& c : clients) {
    auto res = c->Read();
    ASSERT_TRUE(res.has_value());
    EXPECT_EQ(res->body(), "ok");
  }
  EXPECT_EQ(server_->connections(), 200);
}

}  // namespace
}  // namespace tessera
