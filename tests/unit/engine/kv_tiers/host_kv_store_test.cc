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

// Retention: LRU passes over pinned blocks until their pin ends; a Put
// finding only pinned ones to evict is refused.
TEST(HostKvStoreTest, PinnedBlocksOutliveTheLruUntilTheirPinEnds) {
  const int64_t record = static_cast<int64_t>(EncodeKvRecord(Key(0), Bytes(0)).size());
  int64_t now = 100;
  HostKvStore s({.max_bytes = 2 * record, .clock = [&] { return now; }});
  ASSERT_TRUE(s.Put(Key(0), Bytes(0)).ok());
  ASSERT_TRUE(s.Put(Key(1), Bytes(1)).ok());
  EXPECT_FALSE(s.Pin(Key(7), 500));  // not stored
  EXPECT_TRUE(s.Pin(Key(0), 500));   // the least recently used, pinned
  EXPECT_TRUE(s.Pin(Key(0), 300));   // an earlier time does not shorten it
  ASSERT_TRUE(s.Put(Key(2), Bytes(2)).ok());  // evicts 1, not 0
  EXPECT_TRUE(*s.Contains(Key(0)));
  EXPECT_FALSE(*s.Contains(Key(1)));
  EXPECT_EQ(s.stats().pinned_blocks, 1);
  ASSERT_TRUE(s.Pin(Key(2), 500));
  EXPECT_EQ(s.Put(Key(3), Bytes(3)).code(), StatusCode::kResourceExhausted);  // only pinned blocks to evict
  ASSERT_TRUE(s.Put(Key(0), Bytes(0)).ok());  // a replaced block keeps its pin
  now = 500;  // the pins end: ordinary LRU again
  EXPECT_EQ(s.stats().pinned_blocks, 0);
  ASSERT_TRUE(s.Put(Key(3), Bytes(3)).ok());
  EXPECT_FALSE(*s.Contains(Key(2)));
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
