#include "server/responses/redis_response_store.h"

#include <cctype>

#include "common/log.h"
#include "common/sha256.h"
#include "engine/kv_tiers/redis_client.h"
#include "engine/kv_tiers/redis_kv_store.h"

namespace tessera::responses {
namespace {

using kv_tiers::RedisClient;
constexpr size_t kMaxIdBytes = 64;

// Ours are "resp_" + alphanumerics; anything else is unknown without a round trip.
bool PlausibleId(const std::string& id) {
  if (id.empty() || id.size() > kMaxIdBytes) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<RedisResponseStore>> RedisResponseStore::Create(const RedisResponseStoreOptions& options) {
  auto url = kv_tiers::ParseRedisUrl(options.url);
  if (!url.ok()) return InvalidArgument("--responses-store-url " + url.status().message());
  if (options.ttl_s <= 0) return InvalidArgument("responses store: the TTL must be positive");
  if (options.max_record_bytes == 0) return InvalidArgument("responses store: the record cap must be positive");
  url->connect_timeout_ms = options.connect_timeout_ms;
  url->op_timeout_ms = options.op_timeout_ms;
  url->retry_interval_ms = options.retry_interval_ms;
  kv_tiers::RedisClientOptions connection = *url;  // the connection part
  connection.name = "redis responses store";
  ASSIGN_OR_RETURN(std::unique_ptr<RedisClient> client, RedisClient::Create(connection));
  return std::unique_ptr<RedisResponseStore>(new RedisResponseStore(options, std::move(client)));
}

RedisResponseStore::RedisResponseStore(const RedisResponseStoreOptions& options,
                                       std::unique_ptr<kv_tiers::RedisClient> client)
    : options_(options), client_(std::move(client)) {}

RedisResponseStore::~RedisResponseStore() = default;

std::string RedisResponseStore::KeyOf(const std::string& id, const std::string& owner) const {
  if (!PlausibleId(id)) return "";
  return options_.key_prefix + ToHex(Sha256Of(owner)).substr(0, 32) + ":" + id;
}

Status RedisResponseStore::Put(const StoredResponse& e) {
  const std::string key = KeyOf(e.id, e.owner);
  if (key.empty()) return InvalidArgument("responses store: bad id");
  const Json record = {{"id", e.id},
                       {"owner", e.owner},
                       {"response", e.response},
                       {"input_items", e.input_items},
                       {"conversation", e.conversation}};
  const std::string value = record.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (value.size() > options_.max_record_bytes) {
    return ResourceExhausted("responses store: record of " + std::to_string(value.size()) +
                             " bytes is over the cap of " + std::to_string(options_.max_record_bytes));
  }
  const std::string ttl = std::to_string(options_.ttl_s);
  ASSIGN_OR_RETURN(RedisClient::Reply r, client_->Command({"SET", key, value, "EX", ttl}));
  (void)r;
  return Status::Ok();
}

StatusOr<std::shared_ptr<const StoredResponse>> RedisResponseStore::Get(const std::string& id,
                                                                          const std::string& owner) {
  const std::string key = KeyOf(id, owner);
  if (key.empty()) return std::shared_ptr<const StoredResponse>();
  // GETRANGE bounds the read: a value longer than the cap (not ours) is refused.
  const std::string last = std::to_string(options_.max_record_bytes);
  ASSIGN_OR_RETURN(RedisClient::Reply r, client_->Command({"GETRANGE", key, "0", last}));
  if (r.kind != RedisClient::Reply::Kind::kString || r.str.empty()) return std::shared_ptr<const StoredResponse>();
  Json record = r.str.size() > options_.max_record_bytes ? Json() : Json::parse(r.str, nullptr, false);
  if (!record.is_object() || record.value("id", "") != id || record.value("owner", "") != owner ||
      !record.contains("response") || !record.contains("input_items") || !record["conversation"].is_array()) {
    LogWarn("responses store: dropping a bad record under {}", key);
    (void)client_->Command({"DEL", key});
    return std::shared_ptr<const StoredResponse>();
  }
  auto out = std::make_shared<StoredResponse>();
  out->id = id;
  out->owner = owner;
  out->response = std::move(record["response"]);
  out->input_items = std::move(record["input_items"]);
  out->conversation = std::move(record["conversation"]);
  return std::shared_ptr<const StoredResponse>(std::move(out));
}

StatusOr<bool> RedisResponseStore::Delete(const std::string& id, const std::string& owner) {
  const std::string key = KeyOf(id, owner);
  if (key.empty()) return false;
  ASSIGN_OR_RETURN(RedisClient::Reply r, client_->Command({"DEL", key}));
  return r.kind == RedisClient::Reply::Kind::kInteger && r.integer > 0;
}

}  // namespace tessera::responses
