// HttpCall against a peer that accepts but never answers (a frozen or
// partitioned instance): the call ends at idle_timeout, or as soon as its
// `abandon` predicate says so, without waiting out the timeout.
#include "server/router/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

#include <gtest/gtest.h>

namespace tessera {
namespace {

// A listening socket nobody accepts on: the kernel completes connects into
// its backlog, and nothing is ever read or written.
class SilentPeer {
 public:
  SilentPeer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~SilentPeer() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(HttpCallTest, ASilentPeerEndsTheCallAtItsIdleTimeout) {
  SilentPeer peer;
  HttpCallOptions o;
  o.idle_timeout = std::chrono::milliseconds(400);
  HttpCallResult r;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = HttpCall("127.0.0.1", peer.port(), "POST", "/v1/completions", "{}", o, &r);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("timeout"), std::string::npos) << s.message();
  EXPECT_GE(SecondsSince(t0), 0.35);
}

TEST(HttpCallTest, AbandonEndsAWaitLongBeforeTheIdleTimeout) {
  SilentPeer peer;
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<int> polls{0};
  HttpCallOptions o;
  o.idle_timeout = std::chrono::milliseconds(60000);
  o.abandon = [&] {
    ++polls;
    return SecondsSince(t0) > 0.5;  // the health polls took the peer out of rotation
  };
  HttpCallResult r;
  Status s = HttpCall("127.0.0.1", peer.port(), "POST", "/v1/completions", "{}", o, &r);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("abandoned"), std::string::npos) << s.message();
  EXPECT_LT(SecondsSince(t0), 5.0);  // not the minute of idle_timeout
  EXPECT_GE(polls.load(), 2);
}

}  // namespace
}  // namespace tessera
