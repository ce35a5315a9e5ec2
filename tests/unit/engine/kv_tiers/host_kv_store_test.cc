// HostKvStore (the host DRAM tier) and ParseRedisUrl (--kv-offload-remote-url).
#include "engine/kv_tiers/host_kv_store.h"

#include <gtest/gtest.h>

#include "engine/kv_tiers/kv_block_record.h"
#include "engine/kv_tiers/redis_kv_store.h"

namespace tessera::kv_tiers {
namespace {

KvBlockKey Key(uint64_t i, std::string tenant = "") { return {"fp", "layout", Sha256Of(std::to_string(i)), tenant}; }
std::string Bytes(uint64_t i, size_t n = 1000) { return std::string(n, static_cast<char>('a' + i % 26)); }

TEST(HostKvStoreTest, RoundTripLruBoundAndTenants) {
  const int64_t record = static_cast<int64_t>(EncodeKvRecord(Key(0), Bytes(0)).size());
  HostKvStore s({3 * record});
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(s.Put(Key(i), Bytes(i)).ok());
  EXPECT_EQ(*s.Get(Key(0)), Bytes(0));  // 0 is now the most recently used
  ASSERT_TRUE(s.Put(Key(3), Bytes(3)).ok());  // evicts 1
  EXPECT_EQ(s.Get(Key(1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*s.Get(Key(0)), Bytes(0));
  EXPECT_EQ(*s.Get(Key(3)), Bytes(3));
  EXPECT_EQ(s.Get(Key(3, "tenant")).status().code(), StatusCode::kNotFound);
  const KvStoreStats st = s.stats();
  EXPECT_EQ(st.evictions, 1);
  EXPECT_EQ(st.blocks_stored, 3);
  EXPECT_EQ(st.bytes_stored, 3 * record);
  EXPECT_EQ(st.hits, 3);
  EXPECT_EQ(st.misses, 2);
  EXPECT_EQ(s.Put(Key(9), Bytes(9, 4 * record)).code(), StatusCode::kResourceExhausted);
}

TEST(HostKvStoreTest, CorruptRecordIsDroppedAsAMiss) {
  HostKvStore s({1 << 20});
  ASSERT_TRUE(s.Put(Key(1), Bytes(1)).ok());
  ASSERT_TRUE(s.CorruptForTest(Key(1)));
  EXPECT_EQ(s.Get(Key(1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.stats().corrupt, 1);
  EXPECT_FALSE(*s.Contains(Key(1)));
}

TEST(ParseRedisUrlTest, FormsAndErrors) {
  auto a = ParseRedisUrl("redis://10.0.0.5:6380");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "10.0.0.5");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 0);
  auto b = ParseRedisUrl("redis://:s3cret@cache.svc:6379/3");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "cache.svc");
  EXPECT_EQ(b->password, "s3cret");
  EXPECT_EQ(b->db, 3);
  auto c = ParseRedisUrl("valkey://[::1]:7000/");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "::1");
  for (const char* bad : {"http://h:1", "redis://h", "redis://h:0", "redis://h:70000", "redis://h:1/x", "redis://:1",
                          "redis://h:port"}) {
    EXPECT_EQ(ParseRedisUrl(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace tessera::kv_tiers
