#include "engine/kv_tiers/redis_kv_store.h"
#include "common/log.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>


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
namespace {

timeval Ms(int ms) { return {ms / 1000, (ms % 1000) * 1000}; }

Status Down(const std::string& why) { return Status(StatusCode::kUnavailable, "redis KV store: " + why); }

}  // namespace

// What the store needs of a reply, copied out of hiredis' object.
struct RedisKvStore::Reply {
  int type = 0;
  std::string str;
  long long integer = 0;
};

StatusOr<std::unique_ptr<RedisKvStore>> RedisKvStore::Create(const RedisKvStoreOptions& options) {
  if (options.host.empty() || options.port <= 0 || options.port > 65535) {
    return InvalidArgument("redis KV store: bad host or port");
  }
  if (options.connect_timeout_ms <= 0 || options.op_timeout_ms <= 0 || options.max_connections <= 0) {
    return InvalidArgument("redis KV store: timeouts and max_connections must be positive");
  }
  return std::unique_ptr<RedisKvStore>(new RedisKvStore(options));
}

RedisKvStore::~RedisKvStore() {
  for (redisContext* c : idle_) redisFree(c);
}

StatusOr<redisContext*> RedisKvStore::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      redisContext* c = idle_.back();
      idle_.pop_back();
      return c;
    }
    if (std::chrono::steady_clock::now() < down_until_) return Down("unreachable (retrying later)");
  }
  redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port, Ms(options_.connect_timeout_ms));
  auto fail = [&](const std::string& why) -> Status {
    if (c) redisFree(c);
    std::lock_guard<std::mutex> lock(mu_);
    down_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_interval_ms);
    ++stats_.errors;
    return Down(why);
  };
  if (!c) return fail("out of memory");
  if (c->err) return fail(std::string("cannot connect to ") + options_.host + ":" + std::to_string(options_.port) + ": " + c->errstr);
  if (redisSetTimeout(c, Ms(options_.op_timeout_ms)) != REDIS_OK) return fail("cannot set the timeout");
  auto simple = [&](std::vector<std::string> args) -> bool {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    const bool ok = r && r->type != REDIS_REPLY_ERROR;
    if (r) freeReplyObject(r);
    return ok;
  };
  if (!options_.password.empty() && !simple({"AUTH", options_.password})) return fail("AUTH failed");
  if (options_.db != 0 && !simple({"SELECT", std::to_string(options_.db)})) return fail("SELECT failed");
  return c;
}

void RedisKvStore::Release(redisContext* c, bool healthy) {
  std::lock_guard<std::mutex> lock(mu_);
  if (healthy && static_cast<int>(idle_.size()) < options_.max_connections) {
    idle_.push_back(c);
    return;
  }
  redisFree(c);
  if (!healthy) {
    down_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_interval_ms);
    ++stats_.errors;
  }
}

StatusOr<RedisKvStore::Reply> RedisKvStore::Command(const std::vector<std::string_view>& args) {
  ASSIGN_OR_RETURN(redisContext * c, Acquire());
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (!r) {
    const std::string why = c->errstr;
    Release(c, false);
    return Down(why.empty() ? "I/O error" : why);
  }
  Reply out;
  out.type = r->type;
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS) {
    out.str.assign(r->str, r->len);
  }
  out.integer = r->integer;
  freeReplyObject(r);
  Release(c, true);
  if (out.type == REDIS_REPLY_ERROR) return Down("server error: " + out.str.substr(0, 200));
  return out;
}

Status RedisKvStore::Put(const KvBlockKey& key, std::string_view bytes) {
  const std::string record = EncodeKvRecord(key, bytes, options_.secret);
  const std::string k = RedisKeyOf(key);
  const std::string ttl = std::to_string(options_.ttl_s);
  std::vector<std::string_view> argv = {"SET", k, record};
  if (options_.ttl_s > 0) argv.insert(argv.end(), {"EX", ttl});
  ASSIGN_OR_RETURN(Reply r, Command(argv));
  (void)r;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.puts;
  stats_.put_bytes += static_cast<int64_t>(bytes.size());
  return Status::Ok();
}

StatusOr<std::string> RedisKvStore::Get(const KvBlockKey& key) {
  const std::string k = RedisKeyOf(key);
  ASSIGN_OR_RETURN(Reply r, Command({"GET", k}));
  if (r.type != REDIS_REPLY_STRING) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.misses;
    return NotFound("redis KV store: miss");
  }
  KvRecordFault fault = KvRecordFault::kNone;
  StatusOr<std::string> payload = DecodeKvRecord(r.str, key, options_.secret, &fault);
  if (!payload.ok()) {
    LogWarn("redis KV store: dropping {}: {}", k, payload.status().message());
    (void)Command({"DEL", k});
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
  ASSIGN_OR_RETURN(Reply r, Command({"EXISTS", k}));
  return r.type == REDIS_REPLY_INTEGER && r.integer > 0;
}

Status RedisKvStore::Delete(const KvBlockKey& key) {
  const std::string k = RedisKeyOf(key);
  ASSIGN_OR_RETURN(Reply r, Command({"DEL", k}));
  (void)r;
  return Status::Ok();
}

KvStoreStats RedisKvStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tessera::kv_tiers
