#include "server/serving/cache_isolation.h"

#include <gtest/gtest.h>

#include "scheduler/block_hash.h"

namespace tessera {
namespace {

TEST(CacheIsolationTest, ApiKeyModeNamespacesEachKey) {
  Request a, b, c;
  c.cache_salt = "client";
  const std::string t1 = ApiKeyTenantId("key-1"), t2 = ApiKeyTenantId("key-2");
  ASSERT_TRUE(ApplyCacheIsolation(CacheIsolation::kApiKey, t1, &a).ok());
  ASSERT_TRUE(ApplyCacheIsolation(CacheIsolation::kApiKey, t2, &b).ok());
  ASSERT_TRUE(ApplyCacheIsolation(CacheIsolation::kApiKey, t1, &c).ok());
  EXPECT_NE(a.cache_salt, b.cache_salt);
  EXPECT_NE(a.cache_salt, c.cache_salt);  // the client's salt subdivides its key's namespace
  EXPECT_EQ(a.cache_salt, TenantCacheSalt(t1, ""));
  EXPECT_EQ(a.cache_salt.find("key-1"), std::string::npos);  // never the key itself
  Request none;
  EXPECT_EQ(ApplyCacheIsolation(CacheIsolation::kApiKey, "", &none).code(), StatusCode::kInternal);
}

TEST(CacheIsolationTest, SaltModeRequiresASaltAndNoneChangesNothing) {
  Request r;
  const Status s = ApplyCacheIsolation(CacheIsolation::kSalt, "", &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'cache_salt'"), std::string::npos);
  r.cache_salt = "tenant-a";
  EXPECT_TRUE(ApplyCacheIsolation(CacheIsolation::kSalt, "", &r).ok());
  EXPECT_EQ(r.cache_salt, "tenant-a");
  EXPECT_TRUE(ApplyCacheIsolation(CacheIsolation::kNone, ApiKeyTenantId("k"), &r).ok());
  EXPECT_EQ(r.cache_salt, "tenant-a");
}

TEST(CacheIsolationTest, Names) {
  EXPECT_EQ(*ParseCacheIsolation("api-key"), CacheIsolation::kApiKey);
  EXPECT_EQ(*ParseCacheIsolation("salt"), CacheIsolation::kSalt);
  EXPECT_EQ(*ParseCacheIsolation("none"), CacheIsolation::kNone);
  EXPECT_EQ(ParseCacheIsolation("tenant").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CacheIsolationName(CacheIsolation::kApiKey), "api-key");
}

}  // namespace
}  // namespace tessera
