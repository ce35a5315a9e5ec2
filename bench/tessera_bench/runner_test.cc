// Tests of the runner and HTTP client against a scripted in-process HTTP
// server (no model): the concurrency cap, timing of streamed chunks, error
// statuses, timeouts, --max-duration and truncated streams.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include "bench/tessera_bench/runner.h"

namespace tessera::bench {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// What the fake server sends for one request: a status, and for 200 the body
// as pieces written after the given delays (each piece one HTTP chunk).
struct Script {
  int status = 200;
  std::string error_body;
  std::vector<std::pair<double, std::string>> pieces;  // (delay s, bytes)
};

std::string Chunk(const std::string& text) {
  return "data: {\"choices\":[{\"index\":0,\"text\":\"" + text + "\"}]}\n\n";
}

// Streams `n` one-token chunks `gap` seconds apart after `first` seconds,
// then usage and [DONE].
Script Tokens(int n, double first, double gap) {
  Script s;
  for (int i = 0; i < n; ++i) s.pieces.emplace_back(i == 0 ? first : gap, Chunk("t" + std::to_string(i)));
  s.pieces.emplace_back(0, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":" +
                               std::to_string(n) + "}}\n\ndata: [DONE]\n\n");
  return s;
}

class FakeServer {
 public:
  explicit FakeServer(std::function<Script(const std::string& body)> script)
      : script_(std::move(script)), acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~FakeServer() {
    stop_ = true;
    boost::system::error_code ec;
    // Wake the blocked accept() with a throwaway connection.
    tcp::socket s(io_);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
    accept_thread_.join();
    std::lock_guard lock(mu_);
    for (auto& t : conns_) t.join();
  }
  int port() const { return port_; }
  int max_active() const { return max_active_; }
  int requests() const { return requests_; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      tcp::socket sock(io_);
      boost::system::error_code ec;
      acceptor_.accept(sock, ec);
      if (ec || stop_) return;
      std::lock_guard lock(mu_);
      conns_.emplace_back([this, s = std::move(sock)]() mutable { Serve(std::move(s)); });
    }
  }

  void Serve(tcp::socket sock) {
    boost::system::error_code ec;
    asio::streambuf buf;
    size_t n = asio::read_until(sock, buf, "\r\n\r\n", ec);
    if (ec) return;
    std::string data(asio::buffers_begin(buf.data()), asio::buffers_end(buf.data()));
    const std::string head = data.substr(0, n);
    std::string body = data.substr(n);
    size_t len = 0;
    if (auto p = head.find("Content-Length: "); p != std::string::npos) len = std::stoul(head.substr(p + 16));
    if (body.size() < len) {
      std::string rest(len - body.size(), '\0');
      asio::read(sock, asio::buffer(rest), ec);
      body += rest;
    }
    const int now = ++active_;
    int prev = max_active_;
    while (now > prev && !max_active_.compare_exchange_weak(prev, now)) {
    }
    ++requests_;
    Script s = script_(body);
    // Leaves the active count before the last bytes go out: once a client
    // has read a whole response, its request no longer counts as active.
    if (s.status != 200) {
      --active_;
      std::string resp = "HTTP/1.1 " + std::to_string(s.status) + " Error\r\nContent-Type: application/json\r\n" +
                         "Content-Length: " + std::to_string(s.error_body.size()) + "\r\nConnection: close\r\n\r\n" +
                         s.error_body;
      asio::write(sock, asio::buffer(resp), ec);
    } else {
      std::string head_out =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
      asio::write(sock, asio::buffer(head_out), ec);
      for (const auto& [delay, bytes] : s.pieces) {
        if (ec) break;
        std::this_thread::sleep_for(std::chrono::duration<double>(delay));
        char size[32];
        std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
        asio::write(sock, asio::buffer(std::string(size) + bytes + "\r\n"), ec);
      }
      --active_;
      if (!ec) asio::write(sock, asio::buffer(std::string("0\r\n\r\n")), ec);
    }
    sock.shutdown(tcp::socket::shutdown_both, ec);
  }

  std::function<Script(const std::string&)> script_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> active_{0}, max_active_{0}, requests_{0};
  std::mutex mu_;
  std::vector<std::thread> conns_;
  std::thread accept_thread_;
};

RunConfig Config(const FakeServer& srv) {
  RunConfig cfg;
  cfg.base.host = "127.0.0.1";
  cfg.base.port = srv.port();
  cfg.path = "/v1/completions";
  cfg.model = "m";
  cfg.progress = ProgressMode::kOff;
  return cfg;
}

std::vector<RequestSpec> Specs(int n, int64_t max_tokens = 4) {
  std::vector<RequestSpec> v(static_cast<size_t>(n));
  for (auto& s : v) {
    s.prompt = "hello";
    s.prompt_tokens = 1;
    s.max_tokens = max_tokens;
  }
  return v;
}

TEST(Runner, ConcurrencyCapAndChunkTiming) {
  FakeServer srv([](const std::string&) { return Tokens(4, 0.15, 0.05); });
  RunConfig cfg = Config(srv);
  cfg.max_concurrency = 2;
  RunOutput out = RunBenchmark(cfg, Specs(6), std::vector<double>(6, 0.0));
  EXPECT_EQ(srv.requests(), 6);
  EXPECT_EQ(srv.max_active(), 2);  // the server never saw more than the cap
  EXPECT_EQ(out.peak_in_flight, 2);
  // 3 waves of ~0.3 s each.
  EXPECT_GE(out.duration_s, 0.85);
  for (const auto& r : out.records) {
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_TRUE(r.usage_reported);
    EXPECT_EQ(r.output_tokens, 4);
    EXPECT_EQ(r.prompt_tokens, 3);  // from the server's usage, not the spec
    // The server's sleeps bound the times from below (only: a loaded machine
    // may delay one chunk's read and bunch it with the next).
    EXPECT_GE(r.ttft, 0.15);
    ASSERT_EQ(r.itl.size(), 3u);
    double itl_sum = 0;
    for (double g : r.itl) itl_sum += g;
    EXPECT_LE(r.ttft + itl_sum, r.e2e + 1e-9);
    EXPECT_GE(r.e2e, 0.15 + 3 * 0.05);
  }
  Summary s = Summarize(out.records, out.duration_s, Slo{});
  EXPECT_EQ(s.completed, 6);
  EXPECT_EQ(s.total_output_tokens, 24);
}

TEST(Runner, EventsSplitAcrossChunksAndNoUsage) {
  FakeServer srv([](const std::string&) {
    Script s;
    const std::string all = Chunk("a") + Chunk("b") + Chunk("c") + "data: [DONE]\n\n";
    for (size_t i = 0; i < all.size(); i += 7) s.pieces.emplace_back(0.0, all.substr(i, 7));
    return s;
  });
  RunOutput out = RunBenchmark(Config(srv), Specs(2), {0, 0});
  for (const auto& r : out.records) {
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_FALSE(r.usage_reported);
    EXPECT_EQ(r.output_tokens, 3);  // counted chunks
    EXPECT_EQ(r.prompt_tokens, 1);  // the dataset's count
  }
}

TEST(Runner, ErrorStatusTruncatedStreamAndErrorEvent) {
  std::atomic<int> k{0};
  FakeServer srv([&k](const std::string&) {
    Script s;
    switch (k++) {
      case 0:
        s.status = 429;
        s.error_body = R"({"error":{"message":"too many requests"}})";
        break;
      case 1:
        s.pieces.emplace_back(0, Chunk("x"));  // no [DONE]
        break;
      default:
        s.pieces.emplace_back(0, "data: {\"error\":{\"message\":\"engine failed\"}}\n\ndata: [DONE]\n\n");
    }
    return s;
  });
  RunConfig cfg = Config(srv);
  cfg.max_concurrency = 1;  // the order of scripts follows the order of requests
  RunOutput out = RunBenchmark(cfg, Specs(3), {0, 0, 0});
  ASSERT_EQ(out.records.size(), 3u);
  EXPECT_FALSE(out.records[0].ok);
  EXPECT_EQ(out.records[0].http_status, 429);
  EXPECT_NE(out.records[0].error.find("HTTP 429"), std::string::npos);
  EXPECT_NE(out.records[0].error.find("too many requests"), std::string::npos);
  EXPECT_NE(out.records[1].error.find("[DONE]"), std::string::npos) << out.records[1].error;
  EXPECT_NE(out.records[2].error.find("engine failed"), std::string::npos) << out.records[2].error;
  Summary s = Summarize(out.records, out.duration_s, Slo{});
  EXPECT_EQ(s.failed, 3);
  EXPECT_EQ(s.first_errors.size(), 3u);
}

TEST(Runner, TimeoutAndMaxDuration) {
  FakeServer srv([](const std::string&) { return Tokens(2, 1.0, 0.0); });  // first token after 1 s
  RunConfig cfg = Config(srv);
  cfg.timeout_s = 0.2;
  RunOutput out = RunBenchmark(cfg, Specs(2), {0, 0});
  EXPECT_LT(out.duration_s, 0.9);
  for (const auto& r : out.records) {
    EXPECT_FALSE(r.ok);
    EXPECT_FALSE(r.cancelled);
    EXPECT_NE(r.error.find("timeout"), std::string::npos) << r.error;
  }

  cfg.timeout_s = 600;
  cfg.max_concurrency = 1;
  cfg.max_duration_s = 0.3;
  out = RunBenchmark(cfg, Specs(4), {0, 0, 0, 0});
  EXPECT_LT(out.duration_s, 0.9);
  Summary s = Summarize(out.records, out.duration_s, Slo{});
  EXPECT_EQ(s.cancelled, 1);
  EXPECT_EQ(s.not_sent, 3);
  EXPECT_EQ(s.completed + s.failed, 0);
}

TEST(Runner, ArrivalOffsetsAreHonoured) {
  FakeServer srv([](const std::string&) { return Tokens(1, 0.0, 0.0); });
  RunOutput out = RunBenchmark(Config(srv), Specs(3), {0.0, 0.2, 0.4});
  ASSERT_EQ(out.records.size(), 3u);
  EXPECT_LT(out.records[0].send_time, 0.1);
  EXPECT_GE(out.records[1].send_time, 0.2);
  EXPECT_GE(out.records[2].send_time, 0.4);
  EXPECT_LT(out.records[2].send_time, 0.4 + 2.0);
}

TEST(Runner, ModelIdFromModelsEndpointAndRefusedConnection) {
  FakeServer srv([](const std::string&) {
    Script s;
    s.pieces.emplace_back(0, R"({"object":"list","data":[{"id":"my-model","object":"model"},{"id":"other"}]})");
    return s;
  });
  auto id = FirstModelId(BaseUrl{"127.0.0.1", srv.port(), ""}, "");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id.value(), "my-model");

  // A port with nothing listening: a clear connection error, no hang.
  asio::io_context io;
  tcp::acceptor probe(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  BaseUrl base{"127.0.0.1", probe.local_endpoint().port(), ""};
  probe.close();
  id = FirstModelId(base, "");
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("connect"), std::string::npos) << id.status().message();
}

}  // namespace
}  // namespace tessera::bench
