// Rendezvous key-value store: how the ranks of a group find each other (Gloo's
// pair addresses, NCCL's unique id, the join roll call). The leader hosts a
// TcpStoreServer at --leader-addr; every rank, the leader included, talks to it
// through a TcpStore client. Values are small (addresses, ids): the protocol is one
// request/response per call on a blocking socket, and Get waits by polling.
//
// Wire format (little-endian, both ways one frame per call):
//   request  u8 op (0 set, 1 get, 2 create-if-absent, 3 set-when-this-connection-closes)
//            | u32 key bytes | u32 value bytes | key | value
//   response u8 status (0 ok / found / created, 1 missing / exists) | u32 value bytes | value
//
// Thread safety: TcpStore serializes its calls with a mutex; TcpStoreServer runs
// one poll() thread and is stopped by its destructor.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace tessera::parallel {

class Store {
 public:
  virtual ~Store() = default;
  virtual Status Set(const std::string& key, const std::vector<char>& value) = 0;
  // Waits until key exists or timeout passes (DEADLINE_EXCEEDED naming the key).
  virtual StatusOr<std::vector<char>> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Sets key only if absent; returns false when it already existed.
  virtual StatusOr<bool> Create(const std::string& key, const std::vector<char>& value) = 0;
  // Waits until every key exists; the error names the keys still missing.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and
// released), for tests and benchmarks that start a leader on loopback. Another
// process may take it before it is reused: callers retry on EADDRINUSE.
StatusOr<int> FreeLoopbackPort();

// "host:port" -> host, port. IPv6 as "[::1]:port".
Status ParseHostPort(const std::string& addr, std::string* host, int* port);

class TcpStoreServer {
 public:
  // Binds host:port (port 0: any free port, see port()) and starts serving.
  static StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port);
  ~TcpStoreServer();
  int port() const { return port_; }

 private:
  TcpStoreServer() = default;
  void Serve();
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};
  int port_ = 0;
  std::thread thread_;
};

class TcpStore final : public Store {
 public:
  // Connects to the server, retrying (the leader may start later) until timeout.
  // `timeout` also bounds each later request/response.
  static StatusOr<std::unique_ptr<TcpStore>> Connect(const std::string& host, int port,
                                                     std::chrono::milliseconds timeout);
  ~TcpStore() override;

  Status Set(const std::string& key, const std::vector<char>& value) override;
  StatusOr<std::vector<char>> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  StatusOr<bool> Create(const std::string& key, const std::vector<char>& value) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  // The server sets key = value when this client's connection closes (the process
  // exited or was killed): how survivors learn which rank is gone.
  Status SetOnDisconnect(const std::string& key, const std::vector<char>& value);

 private:
  TcpStore() = default;
  // One round trip; *found = response status was 0.
  Status Call(uint8_t op, const std::string& key, const std::vector<char>& value, bool* found,
              std::vector<char>* out);
  std::mutex mu_;
  int fd_ = -1;
  std::string where_;  // "host:port", for messages
};

}  // namespace tessera::parallel
