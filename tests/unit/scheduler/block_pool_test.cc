#include "scheduler/block_pool.h"

#include <gtest/gtest.h>

#include "scheduler/block_hash.h"

namespace tessera {
namespace {

BlockHash H(int i) {
  const int32_t t[] = {i};
  const BlockHashScheme scheme;
  return scheme.HashBlock(scheme.none_hash(), t, {});
}

TEST(BlockPoolTest, AllocatesInOrderAndCountsRefs) {
  BlockPool pool(4, true);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  auto b = pool.Allocate(2);
  EXPECT_EQ(b, (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_DOUBLE_EQ(pool.Usage(), 0.5);
  pool.Touch(0);
  EXPECT_EQ(pool.ref_count(0), 2);
  pool.Release(0);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  pool.Release(0);
  pool.Release(1);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  // Freed blocks join the most-recently-used end.
  EXPECT_EQ(pool.FreeQueue(), (std::vector<BlockId>{2, 3, 0, 1}));
}

TEST(BlockPoolTest, CachedFreeBlocksAreFoundUntilEvictedLru) {
  BlockPool pool(3, true);
  auto b = pool.Allocate(3);
  ASSERT_TRUE(pool.Cache(b[0], H(0)));
  ASSERT_TRUE(pool.Cache(b[1], H(1)));
  EXPECT_FALSE(pool.Cache(b[2], H(1)));  // hash already held by another block
  EXPECT_FALSE(pool.Cache(b[0], H(5)));  // block already cached
  pool.Release(b[1]);  // freed first: least recently used
  pool.Release(b[0]);
  pool.Release(b[2]);
  EXPECT_EQ(pool.Lookup(H(1)), b[1]);
  EXPECT_EQ(pool.Lookup(H(0)), b[0]);
  // A hit takes the block back out of the free queue.
  pool.Touch(b[0]);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_EQ(pool.FreeQueue(), (std::vector<BlockId>{b[1], b[2]}));
  // Allocation evicts from the LRU end: b[1] loses its hash.
  auto c = pool.Allocate(1);
  EXPECT_EQ(c[0], b[1]);
  EXPECT_FALSE(pool.Lookup(H(1)).has_value());
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_EQ(pool.Lookup(H(0)), b[0]);  // in use, still cached
  pool.Release(b[0]);
  pool.Release(c[0]);
  EXPECT_EQ(pool.num_free_blocks(), 3);
  pool.ResetPrefixCache();
  EXPECT_FALSE(pool.Lookup(H(0)).has_value());
}

TEST(BlockPoolTest, CachingOffNeverCaches) {
  BlockPool pool(2, false);
  auto b = pool.Allocate(1);
  EXPECT_FALSE(pool.Cache(b[0], H(0)));
  EXPECT_FALSE(pool.Lookup(H(0)).has_value());
}

}  // namespace
}  // namespace tessera
