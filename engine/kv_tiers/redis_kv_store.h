// RedisKvStore: the shared remote tier in Redis or Valkey (hiredis), as
// LMCache's remote backend: one string value per block, a record
// (kv_block_record.h) under "PREFIX<KeyId>", so keys carry no prompt text,
// model name or salt, and every Get re-checks size, checksum and key (model
// fingerprint, layout, hash, tenant); a bad value is deleted and is a miss.
//
// Connections: a RedisClient (redis_client.h): pooled, every command under
// connect_timeout / op_timeout (UNAVAILABLE, never a hang), fail-fast for
// retry_interval after a failure, then reconnecting.
//
// Thread-safe. Call from AsyncKvStore's workers, not the engine loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/kv_tiers/kv_block_store.h"
#include "engine/kv_tiers/redis_client.h"

namespace tessera::kv_tiers {

// The connection (host, port, password, db, timeouts, pool) is the client's.
struct RedisKvStoreOptions : RedisClientOptions {
  std::string key_prefix = "tessera:kv:";
  int64_t ttl_s = 0;     // 0: no expiry (rely on Redis' maxmemory policy)
  // The deployment secret records are authenticated under ("" : none): with
  // one, a record whose MAC is not this secret's is refused (kv_block_record.h).
  std::string secret = "";
};

// `redis://[[user]:password@]HOST:PORT[/DB]` (the --kv-offload-remote-url
// form; `valkey://` too) into host, port, password and db of `base`.
// INVALID_ARGUMENT naming what is wrong. The user name is ignored (AUTH with
// the password only, Redis < 6 style).
StatusOr<RedisKvStoreOptions> ParseRedisUrl(const std::string& url, RedisKvStoreOptions base = {});

class RedisKvStore final : public KvBlockStore {
 public:
  // Does not connect: an unreachable server is not an error until used.
  static StatusOr<std::unique_ptr<RedisKvStore>> Create(const RedisKvStoreOptions& options);
  ~RedisKvStore() override;

  Status Put(const KvBlockKey& key, std::string_view bytes) override;
  StatusOr<std::string> Get(const KvBlockKey& key) override;
  StatusOr<bool> Contains(const KvBlockKey& key) override;
  Status Delete(const KvBlockKey& key) override;
  KvStoreStats stats() const override;
  const char* name() const override { return "redis"; }

  std::string RedisKeyOf(const KvBlockKey& key) const { return options_.key_prefix + KeyId(key); }

 private:
  RedisKvStore(const RedisKvStoreOptions& options, std::unique_ptr<RedisClient> client)
      : options_(options), client_(std::move(client)) {}

  RedisKvStoreOptions options_;
  std::unique_ptr<RedisClient> client_;
  mutable std::mutex mu_;
  KvStoreStats stats_;  // guarded by mu_; errors: client_'s
};

}  // namespace tessera::kv_tiers
