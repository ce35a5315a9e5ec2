// --cache-isolation: which requests may share prefix-cache blocks (prefix hits,
// KV tiers, KV events and KV-aware routing all key blocks by the same chained
// hash, so one namespace covers them all). docs/architecture.md, "Tenant
// isolation", has the threat model: a request's latency reveals whether its
// prefix was cached, i.e. whether someone sharing its namespace sent it.
//
//   none     vLLM's behaviour: requests share unless they set cache_salt.
//   api-key  each API key (--api-key) is a namespace; cache_salt subdivides it.
//   salt     every generation request must carry cache_salt (a gateway sets
//            it per tenant); one without is refused naming 'cache_salt'.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "scheduler/request.h"

namespace tessera {

enum class CacheIsolation { kNone, kApiKey, kSalt };

// "none" | "api-key" | "salt"; INVALID_ARGUMENT naming the flag otherwise.
StatusOr<CacheIsolation> ParseCacheIsolation(std::string_view name);
std::string_view CacheIsolationName(CacheIsolation mode);

// The tenant of a request that presented the deployment's internal key (the
// router): its cache_salt is already in its client's namespace (the router's
// --cache-isolation api-key), or shared by the router's clients (the router's
// none), and is used as it came. No ApiKeyTenantId (64 hex digits) equals it.
inline constexpr std::string_view kRouterTenant = "router";

// Puts `request` in its namespace: `tenant` is the matched API key's id
// (ApiKeyTenantId; "" without keys; kRouterTenant). INVALID_ARGUMENT naming 'cache_salt' in
// salt mode without one; INTERNAL in api-key mode without a tenant (the
// server requires keys in that mode, so this is a bug). O(salt).
Status ApplyCacheIsolation(CacheIsolation mode, std::string_view tenant, Request* request);

}  // namespace tessera
