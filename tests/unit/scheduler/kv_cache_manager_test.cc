#include "scheduler/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace tessera {
namespace {

std::unique_ptr<KvCacheManager> Make(int32_t blocks, int32_t block_size = 4, bool caching = true) {
  auto m = KvCacheManager::Create({blocks, block_size, caching});
  EXPECT_TRUE(m.ok());
  return std::move(m).value();
}

std::vector<int32_t> Iota(int n, int start = 1) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(KvCacheManagerTest, SizingFromBudget) {
  EXPECT_EQ(KvBytesPerToken(24, 2, 64, 2), 2 * 24 * 2 * 64 * 2);
  auto n = NumBlocksForBudget(1 << 20, 1024, 16);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 64);
  EXPECT_EQ(NumBlocksForBudget(100, 1024, 16).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(KvCacheManager::Create({0, 16, true}).ok());
}

TEST(KvCacheManagerTest, AllocatesGrowsAndFrees) {
  auto m = Make(8);
  std::vector<CopyOp> copies;
  PrefixHit none;
  ASSERT_TRUE(m->AllocateSlots(1, 0, 6, 0, &none, &copies));  // 6 tokens -> 2 blocks
  EXPECT_EQ(m->blocks(1).size(), 2u);
  ASSERT_TRUE(m->AllocateSlots(1, 6, 1, 0, nullptr, &copies));  // position 6 still in block 1
  EXPECT_EQ(m->blocks(1).size(), 2u);
  ASSERT_TRUE(m->AllocateSlots(1, 7, 1, 2, nullptr, &copies));  // 8 + lookahead 2 -> 3 blocks
  EXPECT_EQ(m->blocks(1).size(), 3u);
  EXPECT_FALSE(m->AllocateSlots(2, 0, 24, 0, &none, &copies));  // 6 blocks > 5 free: no change
  EXPECT_FALSE(m->Holds(2));
  EXPECT_EQ(m->num_free_blocks(), 5);
  EXPECT_TRUE(copies.empty());
  m->Free(1);
  EXPECT_EQ(m->num_free_blocks(), 8);
  EXPECT_DOUBLE_EQ(m->Usage(), 0.0);
}

TEST(KvCacheManagerTest, PrefixHitsFollowTheHashChainAndCountTokens) {
  auto m = Make(16);
  const std::vector<int32_t> a = Iota(10);  // blocks [1..4] [5..8] + 2 tokens
  std::vector<BlockHash> ha;
  BlockHashScheme().ExtendBlockHashes(a, 4, {}, "", &ha);
  ASSERT_EQ(ha.size(), 2u);
  std::vector<CopyOp> copies;
  PrefixHit hit = m->FindCachedPrefix(ha, 10);
  EXPECT_TRUE(hit.blocks.empty());
  ASSERT_TRUE(m->AllocateSlots(1, 0, 10, 0, &hit, &copies));
  m->CacheComputedBlocks(1, ha, 10);
  const std::vector<BlockId> a_blocks(m->blocks(1).begin(), m->blocks(1).end());

  // Same first block, different second: the chain stops at the first miss.
  std::vector<int32_t> b = a;
  b[5] = 99;
  std::vector<BlockHash> hb;
  BlockHashScheme().ExtendBlockHashes(b, 4, {}, "", &hb);
  hit = m->FindCachedPrefix(hb, 10);
  ASSERT_EQ(hit.blocks.size(), 1u);
  EXPECT_EQ(hit.blocks[0], a_blocks[0]);
  ASSERT_TRUE(m->AllocateSlots(2, hit.num_tokens, 6, 0, &hit, &copies));
  EXPECT_EQ(m->pool().ref_count(a_blocks[0]), 2);

  // A different cache key (e.g. LoRA id) never shares.
  const uint64_t salt[] = {42};
  std::vector<BlockHash> hs;
  BlockHashScheme().ExtendBlockHashes(a, 4, salt, "", &hs);
  EXPECT_TRUE(m->FindCachedPrefix(hs, 10).blocks.empty());

  // The hit is capped so one token is left to compute: an 8-token prompt
  // whose 2 blocks are both cached reuses only the first.
  std::vector<BlockHash> h8(ha.begin(), ha.end());
  EXPECT_EQ(m->FindCachedPrefix(h8, 8).blocks.size(), 1u);
  EXPECT_EQ(m->FindCachedPrefix(h8, 9).blocks.size(), 2u);

  const KvCacheStats st = m->stats();
  EXPECT_EQ(st.prefix_queries, 20);
  EXPECT_EQ(st.prefix_hits, 4);
}

TEST(KvCacheManagerTest, FreedCachedBlocksAreEvictedDeepestFirst) {
  auto m = Make(4);
  const std::vector<int32_t> a = Iota(13);  // 3 full blocks + 1
  std::vector<BlockHash> ha;
  BlockHashScheme().ExtendBlockHashes(a, 4, {}, "", &ha);
  std::vector<CopyOp> copies;
  PrefixHit none;
  ASSERT_TRUE(m->AllocateSlots(1, 0, 13, 0, &none, &copies));
  m->CacheComputedBlocks(1, ha, 13);
  const std::vector<BlockId> blocks(m->blocks(1).begin(), m->blocks(1).end());
  m->Free(1);
  // Tail blocks are evicted first; the prompt's head stays findable longest.
  EXPECT_EQ(m->pool().FreeQueue(), (std::vector<BlockId>{blocks[3], blocks[2], blocks[1], blocks[0]}));
  ASSERT_TRUE(m->AllocateSlots(2, 0, 8, 0, &none, &copies));  // takes blocks[3] and blocks[2]
  EXPECT_EQ(m->FindCachedPrefix(ha, 13).blocks, (std::vector<BlockId>{blocks[0], blocks[1]}));
  EXPECT_EQ(m->stats().evictions, 1);  // blocks[3] was partial, never cached
  // A hit on a free cached block takes it out of the free queue.
  PrefixHit hit = m->FindCachedPrefix(ha, 13);
  EXPECT_FALSE(m->AllocateSlots(3, 8, 5, 0, &hit, &copies));  // needs 4 blocks, 2 exist
  EXPECT_EQ(m->num_free_blocks(), 2);
  hit.blocks.resize(1);
  hit.num_tokens = 4;
  ASSERT_TRUE(m->AllocateSlots(3, 4, 1, 0, &hit, &copies));
  EXPECT_EQ(m->blocks(3)[0], blocks[0]);
  EXPECT_EQ(m->num_free_blocks(), 0);  // one touched from the free queue, one allocated
}

TEST(KvCacheManagerTest, ForkSharesAndCopiesOnWrite) {
  auto m = Make(8);
  std::vector<CopyOp> copies;
  PrefixHit none;
  ASSERT_TRUE(m->AllocateSlots(1, 0, 6, 3, &none, &copies));  // 6 tokens + lookahead: 3 blocks
  ASSERT_EQ(m->blocks(1).size(), 3u);
  const std::vector<BlockId> p(m->blocks(1).begin(), m->blocks(1).end());
  m->Fork(1, 2, 6);  // shares the full block and the partial one, not the empty lookahead block
  ASSERT_EQ(m->blocks(2).size(), 2u);
  EXPECT_EQ(m->pool().ref_count(p[0]), 2);
  EXPECT_EQ(m->pool().ref_count(p[1]), 2);
  EXPECT_EQ(m->pool().ref_count(p[2]), 1);

  // The child writes position 6 into the shared partial block: copy first.
  ASSERT_TRUE(m->AllocateSlots(2, 6, 1, 0, nullptr, &copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, p[1]);
  EXPECT_EQ(copies[0].dst, m->blocks(2)[1]);
  EXPECT_NE(m->blocks(2)[1], p[1]);
  EXPECT_EQ(m->blocks(2)[0], p[0]);  // full block stays shared
  EXPECT_EQ(m->pool().ref_count(p[1]), 1);
  // The parent now owns its partial block alone: writes in place.
  copies.clear();
  ASSERT_TRUE(m->AllocateSlots(1, 6, 1, 0, nullptr, &copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(m->stats().cow_copies, 1);

  m->Free(1);
  EXPECT_EQ(m->pool().ref_count(p[0]), 1);
  m->Free(2);
  EXPECT_EQ(m->num_free_blocks(), 8);
}

TEST(KvCacheManagerTest, ForkAtABlockBoundaryNeedsNoCopy) {
  auto m = Make(8);
  std::vector<CopyOp> copies;
  PrefixHit none;
  ASSERT_TRUE(m->AllocateSlots(1, 0, 8, 0, &none, &copies));
  m->Fork(1, 2, 8);
  ASSERT_TRUE(m->AllocateSlots(2, 8, 1, 0, nullptr, &copies));
  ASSERT_TRUE(m->AllocateSlots(1, 8, 1, 0, nullptr, &copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_NE(m->blocks(1)[2], m->blocks(2)[2]);
}

}  // namespace
}  // namespace tessera
