// The router's arithmetic (scheduler/routing_cost.h), shared by the router and
// the twin's cluster: values worked by hand.
#include "scheduler/routing_cost.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(RoutingCostTest, NamesLoadAndKvAwareCostByHand) {
  EXPECT_EQ(*ParseRoutingLogic("kv-aware"), RoutingLogic::kKvAware);
  EXPECT_EQ(RoutingLogicName(*ParseRoutingLogic("round-robin")), std::string("round-robin"));
  auto bad = ParseRoutingLogic("nearest");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--routing-logic nearest"), std::string::npos);

  EXPECT_EQ(LoadScore(100, 3), 100 + 3 * 256);
  EXPECT_EQ(RoutingDecodeWork(-1), 256);
  EXPECT_EQ(RoutingDecodeWork(7), 7);
  EXPECT_EQ(UsableHitBlocks(33, 16), 2);  // the last token's block is computed
  EXPECT_EQ(UsableHitBlocks(32, 16), 1);
  EXPECT_EQ(UsableHitBlocks(0, 16), 0);

  // 100-token prompt, 32 held, 40 pending, 2 waiting, half the pool used.
  KvAwareCandidate c;
  c.hit_tokens = 32;
  c.pending_tokens = 40;
  c.waiting = 2;
  c.kv_usage = 0.5;
  EXPECT_EQ(KvAwareEvictTokens(c, 100, 10), 0);  // the pool's size unknown: no eviction term
  EXPECT_DOUBLE_EQ(KvAwareCost(c, 100, 10), 68 + 40 + 512 + 128);
  // A 10-block pool holding 8: the request adds ceil((68 + 10) / 16) = 5 blocks, 3 past the room.
  c.pool_known = true;
  c.held_blocks = 8;
  c.num_blocks = 10;
  EXPECT_EQ(KvAwareEvictTokens(c, 100, 10), 3 * 16);
  EXPECT_DOUBLE_EQ(KvAwareCost(c, 100, 10), 68 + 40 + 512 + 128 + 48);
  EXPECT_TRUE(KvAwareBetter(1, 0, 2, 5));
  EXPECT_TRUE(KvAwareBetter(2, 6, 2, 5));   // a tie goes to the larger hit
  EXPECT_FALSE(KvAwareBetter(2, 5, 2, 5));  // else to the first
}

}  // namespace
}  // namespace tessera
