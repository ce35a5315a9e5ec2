// RedisClient: a small pool of hiredis connections shared by the Redis KV
// tier (redis_kv_store.h) and the Responses API's shared store
// (server/responses/redis_response_store.h), so both get the same failure
// behaviour. Every command runs under connect_timeout / op_timeout, so a
// stopped or hung server costs a caller at most those (UNAVAILABLE), never a
// hang. After a failure the client fails fast (UNAVAILABLE, no connection
// attempt) for retry_interval, then reconnects on the next call: a Redis that
// comes back is used again.
//
// Thread-safe; each pooled connection is used by one thread at a time.
// Blocking: call from worker threads, never from an I/O or engine loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

struct redisContext;

namespace tessera::kv_tiers {

struct RedisClientOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string password;  // "" : no AUTH
  int db = 0;
  int connect_timeout_ms = 200;
  int op_timeout_ms = 500;
  int retry_interval_ms = 1000;
  int max_connections = 4;
  std::string name = "redis";  // prefixes every error message ("redis KV store: …")
};

class RedisClient {
 public:
  // What a caller needs of a reply, copied out of hiredis' object.
  struct Reply {
    enum class Kind { kNil, kString, kInteger, kStatus, kOther };
    Kind kind = Kind::kNil;
    std::string str;   // kString, kStatus
    long long integer = 0;  // kInteger
  };

  // Does not connect: an unreachable server is not an error until used.
  static StatusOr<std::unique_ptr<RedisClient>> Create(const RedisClientOptions& options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // One command; UNAVAILABLE on any I/O failure (the connection is dropped,
  // the client fails fast for retry_interval) or an error reply.
  StatusOr<Reply> Command(const std::vector<std::string_view>& argv);
  // Connection failures so far (each also starts a fail-fast interval).
  int64_t errors() const;

 private:
  explicit RedisClient(const RedisClientOptions& options) : options_(options) {}
  StatusOr<redisContext*> Acquire();  // a connected context (pooled or new), or UNAVAILABLE
  void Release(redisContext* c, bool healthy);
  Status Down(const std::string& why) const;

  const RedisClientOptions options_;
  mutable std::mutex mu_;
  std::vector<redisContext*> idle_;                   // guarded by mu_
  std::chrono::steady_clock::time_point down_until_;  // guarded by mu_
  int64_t errors_ = 0;                                // guarded by mu_
};

}  // namespace tessera::kv_tiers
