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

// Puts `request` in its namespace: `tenant` is the matched API key's id
// (ApiKeyTenantId; "" without keys). INVALID_ARGUMENT naming 'cache_salt' in
// salt mode without one; INTERNAL in api-key mode without a tenant (the
// server requires keys in that mode, so this is a bug). O(salt).
Status ApplyCacheIsolation(CacheIsolation mode, std::string_view tenant, Request* request);

}  // namespace tessera
