#include "engine/kv_tiers/redis_kv_store.h"
#include "common/log.h"

#include "engine/kv_tiers/kv_block_record.h"

namespace tessera::kv_tiers {

StatusOr<RedisKvStoreOptions> ParseRedisUrl(const std::string& url, RedisKvStoreOptions base) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("'" + url + "': " + why + " (expected redis://HOST:PORT or redis://HOST:PORT/DB)");
  };
  std::string rest;
  for (const char* scheme : {"redis://", "valkey://"}) {
    if (url.rfind(scheme, 0) == 0) rest = url.substr(std::string(scheme).size());
  }
  if (rest.empty()) return bad("not a redis:// URL");
  if (const size_t at = rest.rfind('@'); at != std::string::npos) {
    const std::string userinfo = rest.substr(0, at);
    const size_t colon = userinfo.find(':');
    base.password = colon == std::string::npos ? userinfo : userinfo.substr(colon + 1);
    rest = rest.substr(at + 1);
  }
  std::string hostport = rest;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    hostport = rest.substr(0, slash);
    const std::string db = rest.substr(slash + 1);
    if (!db.empty()) {
      if (db.size() > 4 || db.find_first_not_of("0123456789") != std::string::npos) return bad("bad database number");
      base.db = std::stoi(db);
    }
  }
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("missing HOST:PORT");
  const std::string port = hostport.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535) {
    return bad("bad port");
  }
  base.host = hostport.substr(0, colon);
  if (base.host.size() > 2 && base.host.front() == '[' && base.host.back() == ']') {
    base.host = base.host.substr(1, base.host.size() - 2);  // [IPv6]
  }
  base.port = std::stoi(port);
  return base;
}
StatusOr<std::unique_ptr<RedisKvStore>> RedisKvStore::Create(const RedisKvStoreOptions& options) {
  RedisClientOptions connection = options;  // the connection part
  connection.name = "redis KV store";
  ASSIGN_OR_RETURN(std::unique_ptr<RedisClient> client, RedisClient::Create(connection));
  return std::unique_ptr<RedisKvStore>(new RedisKvStore(options, std::move(client)));
}

RedisKvStore::~RedisKvStore() = default;

Status RedisKvStore::Put(const KvBlockKey& key, std::string_view bytes) {
  const std::string record = EncodeKvRecord(key, bytes, options_.secret);
  const std::string k = RedisKeyOf(key);
  const std::string ttl = std::to_string(options_.ttl_s);
  std::vector<std::string_view> argv = {"SET", k, record};
  if (options_.ttl_s > 0) argv.insert(argv.end(), {"EX", ttl});
  ASSIGN_OR_RETURN(RedisClient::Reply r, client_->Command(argv));
  (void)r;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.puts;
  stats_.put_bytes += static_cast<int64_t>(bytes.size());
  return Status::Ok();
}

StatusOr<std::string> RedisKvStore::Get(const KvBlockKey& key) {
  const std::string k = RedisKeyOf(key);
  ASSIGN_OR_RETURN(RedisClient::Reply r, client_->Command({"GET", k}));
  if (r.kind != RedisClient::Reply::Kind::kString) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.misses;
    return NotFound("redis KV store: miss");
  }
  KvRecordFault fault = KvRecordFault::kNone;
  StatusOr<std::string> payload = DecodeKvRecord(r.str, key, options_.secret, &fault);
  if (!payload.ok()) {
    LogWarn("redis KV store: dropping {}: {}", k, payload.status().message());
    (void)client_->Command({"DEL", k});
    std::lock_guard<std::mutex> lock(mu_);
    ++(fault == KvRecordFault::kUnauthenticated ? stats_.rejected : stats_.corrupt);
    ++stats_.misses;
    return NotFound("redis KV store: bad block dropped (" + payload.status().message() + ")");
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.hits;
  stats_.hit_bytes += static_cast<int64_t>(payload->size());
  return payload;
}

StatusOr<bool> RedisKvStore::Contains(const KvBlockKey& key) {
  const std::string k = RedisKeyOf(key);
  ASSIGN_OR_RETURN(RedisClient::Reply r, client_->Command({"EXISTS", k}));
  return r.kind == RedisClient::Reply::Kind::kInteger && r.integer > 0;
}

Status RedisKvStore::Delete(const KvBlockKey& key) {
  const std::string k = RedisKeyOf(key);
  ASSIGN_OR_RETURN(RedisClient::Reply r, client_->Command({"DEL", k}));
  (void)r;
  return Status::Ok();
}

KvStoreStats RedisKvStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvStoreStats s = stats_;
  s.errors = client_->errors();
  return s;
}

}  // namespace tessera::kv_tiers
