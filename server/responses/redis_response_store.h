// RedisResponseStore: the Responses API's finished responses in Redis or
// Valkey (serve --responses-store-url), so every instance configured with
// the same URL can read, continue and delete them (docs/architecture.md,
// "Responses API"). One string value per response: the StoredResponse as
// JSON (id, owner, response, input_items, conversation) under
// "PREFIX<hex digest of the owner>:<id>", with a TTL. Keys carry the
// owner's digest, never an API key; a record is also re-checked for its
// owner and id on read.
//
// Bounded: a record over max_record_bytes is not written (RESOURCE_EXHAUSTED)
// and a read fetches at most that many bytes; every command runs under the
// Redis client's connect / op timeouts and fails fast while Redis is down
// (UNAVAILABLE): engine/kv_tiers/redis_client.h, shared with the Redis KV tier.
// Thread-safe; blocking (call off the I/O threads).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "server/responses/response_store.h"

namespace tessera::kv_tiers {
class RedisClient;
}

namespace tessera::responses {

struct RedisResponseStoreOptions {
  std::string url;                        // redis://[[user]:password@]HOST:PORT[/DB]
  int64_t ttl_s = int64_t{30} * 86400;    // per record (OpenAI keeps responses 30 days); > 0
  size_t max_record_bytes = size_t{16} << 20;
  std::string key_prefix = "tessera:responses:";
  int connect_timeout_ms = 200;
  int op_timeout_ms = 500;
  int retry_interval_ms = 1000;
};

class RedisResponseStore final : public SharedResponseStore {
 public:
  // Does not connect. INVALID_ARGUMENT for a bad URL or limits.
  static StatusOr<std::unique_ptr<RedisResponseStore>> Create(const RedisResponseStoreOptions& options);
  ~RedisResponseStore() override;

  Status Put(const StoredResponse& entry) override;
  StatusOr<std::shared_ptr<const StoredResponse>> Get(const std::string& id, const std::string& owner) override;
  StatusOr<bool> Delete(const std::string& id, const std::string& owner) override;
  const char* kind() const override { return "redis"; }

  // The key of `id` for `owner` ("" for an id that cannot be one of ours).
  std::string KeyOf(const std::string& id, const std::string& owner) const;

 private:
  RedisResponseStore(const RedisResponseStoreOptions& options, std::unique_ptr<kv_tiers::RedisClient> client);
  const RedisResponseStoreOptions options_;
  std::unique_ptr<kv_tiers::RedisClient> client_;
};

}  // namespace tessera::responses
