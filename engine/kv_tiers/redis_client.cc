#include "engine/kv_tiers/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

namespace tessera::kv_tiers {
namespace {

timeval Ms(int ms) { return {ms / 1000, (ms % 1000) * 1000}; }

}  // namespace

Status RedisClient::Down(const std::string& why) const {
  return Status(StatusCode::kUnavailable, options_.name + ": " + why);
}

StatusOr<std::unique_ptr<RedisClient>> RedisClient::Create(const RedisClientOptions& options) {
  if (options.host.empty() || options.port <= 0 || options.port > 65535) {
    return InvalidArgument(options.name + ": bad host or port");
  }
  if (options.connect_timeout_ms <= 0 || options.op_timeout_ms <= 0 || options.max_connections <= 0) {
    return InvalidArgument(options.name + ": timeouts and max_connections must be positive");
  }
  return std::unique_ptr<RedisClient>(new RedisClient(options));
}

RedisClient::~RedisClient() {
  for (redisContext* c : idle_) redisFree(c);
}

int64_t RedisClient::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

StatusOr<redisContext*> RedisClient::Acquire() {
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
    ++errors_;
    return Down(why);
  };
  if (!c) return fail("out of memory");
  if (c->err) {
    return fail(std::string("cannot connect to ") + options_.host + ":" + std::to_string(options_.port) + ": " +
                c->errstr);
  }
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

void RedisClient::Release(redisContext* c, bool healthy) {
  std::lock_guard<std::mutex> lock(mu_);
  if (healthy && static_cast<int>(idle_.size()) < options_.max_connections) {
    idle_.push_back(c);
    return;
  }
  redisFree(c);
  if (!healthy) {
    down_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_interval_ms);
    ++errors_;
  }
}

StatusOr<RedisClient::Reply> RedisClient::Command(const std::vector<std::string_view>& args) {
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
  std::string error;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.kind = Reply::Kind::kString; break;
    case REDIS_REPLY_STATUS: out.kind = Reply::Kind::kStatus; break;
    case REDIS_REPLY_INTEGER: out.kind = Reply::Kind::kInteger; break;
    case REDIS_REPLY_NIL: out.kind = Reply::Kind::kNil; break;
    default: out.kind = Reply::Kind::kOther; break;
  }
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) out.str.assign(r->str, r->len);
  if (r->type == REDIS_REPLY_ERROR) error.assign(r->str, std::min<size_t>(r->len, 200));
  out.integer = r->integer;
  const bool failed = r->type == REDIS_REPLY_ERROR;
  freeReplyObject(r);
  Release(c, true);
  if (failed) return Down("server error: " + error);
  return out;
}

}  // namespace tessera::kv_tiers
