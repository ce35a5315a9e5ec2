#include "server/serving/cache_isolation.h"

#include "scheduler/block_hash.h"

namespace tessera {

StatusOr<CacheIsolation> ParseCacheIsolation(std::string_view name) {
  if (name == "none") return CacheIsolation::kNone;
  if (name == "api-key") return CacheIsolation::kApiKey;
  if (name == "salt") return CacheIsolation::kSalt;
  return InvalidArgument("--cache-isolation must be none, api-key or salt, got '" + std::string(name.substr(0, 64)) +
                         "'");
}

std::string_view CacheIsolationName(CacheIsolation mode) {
  switch (mode) {
    case CacheIsolation::kApiKey: return "api-key";
    case CacheIsolation::kSalt: return "salt";
    case CacheIsolation::kNone: break;
  }
  return "none";
}

Status ApplyCacheIsolation(CacheIsolation mode, std::string_view tenant, Request* request) {
  switch (mode) {
    case CacheIsolation::kNone: return Status::Ok();
    case CacheIsolation::kSalt:
      if (request->cache_salt.empty()) {
        return InvalidArgument("'cache_salt' is required: this server keeps each tenant's prefix cache apart by "
                               "cache_salt (--cache-isolation salt)");
      }
      return Status::Ok();
    case CacheIsolation::kApiKey:
      if (tenant.empty()) return Internal("--cache-isolation api-key: request without a matched API key");
      if (tenant == kRouterTenant) return Status::Ok();
      request->cache_salt = TenantCacheSalt(tenant, request->cache_salt);
      return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace tessera
