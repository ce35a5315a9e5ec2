// Retention in the scheduler (docs/architecture.md, "Retention"): the pool's
// eviction order with held blocks, expiry, demotion to a lower tier, and the
// per-key / global budgets.
#include <gtest/gtest.h>

#include <unordered_set>

#include "scheduler/block_pool.h"
#include "scheduler/retention_ledger.h"
#include "scheduler/scheduler.h"

namespace tessera {
namespace {

BlockHash H(int i) {
  const int32_t t[] = {i};
  const BlockHashScheme scheme;
  return scheme.HashBlock(scheme.none_hash(), t, {});
}

// A lower tier that takes over the blocks it was told it holds.
class FakeTier : public RetainedBlockDemoter {
 public:
  bool HoldUntil(const BlockHash& hash, int64_t until_ns) override {
    asked.push_back(until_ns);
    return holds.count(hash) != 0;
  }
  std::unordered_set<BlockHash, BlockHashHasher> holds;
  std::vector<int64_t> asked;
};

// Blocks 0..n-1 cached under H(i) and freed in order 0..n-1 (0 least recent).
BlockPool CachedPool(int n) {
  BlockPool pool(n, true);
  auto b = pool.Allocate(n);
  for (int i = 0; i < n; ++i) EXPECT_TRUE(pool.Cache(b[i], H(i)));
  for (int i = 0; i < n; ++i) pool.Release(b[i]);
  return pool;
}

TEST(RetentionPoolTest, UnretainedBlocksAreEvictedFirstAndHeldOnesNever) {
  BlockPool pool = CachedPool(4);
  pool.ExpireRetention(100);
  pool.Retain(0, 1000);  // least recently used, but held
  pool.Retain(1, 1000);
  EXPECT_EQ(pool.FreeQueue(), (std::vector<BlockId>{2, 3}));
  EXPECT_EQ(pool.RetainedQueue(), (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(pool.num_free_blocks(), 2);  // held blocks are not free
  EXPECT_DOUBLE_EQ(pool.Usage(), 0.0);   // nor in use
  EXPECT_EQ(pool.num_retained_blocks(), 2);
  EXPECT_FALSE(pool.EnsureFree(3));  // no tier: admission waits
  EXPECT_EQ(pool.Allocate(2), (std::vector<BlockId>{2, 3}));
  EXPECT_TRUE(pool.Lookup(H(0)).has_value());
  EXPECT_TRUE(pool.Lookup(H(1)).has_value());
  EXPECT_FALSE(pool.Lookup(H(2)).has_value());
}

TEST(RetentionPoolTest, ExpiredHoldsAreOrdinaryLruAgain) {
  BlockPool pool = CachedPool(3);
  pool.ExpireRetention(100);
  pool.Retain(2, 500);
  pool.Retain(1, 300);
  pool.Retain(1, 200);  // an earlier time does not shorten a hold
  EXPECT_EQ(pool.retained_until(1), 300);
  pool.ExpireRetention(299);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  pool.ExpireRetention(300);  // 1's hold ended: it is next to go
  EXPECT_EQ(pool.FreeQueue(), (std::vector<BlockId>{1, 0}));
  EXPECT_EQ(pool.RetainedQueue(), (std::vector<BlockId>{2}));
  EXPECT_EQ(pool.num_retained_blocks(), 1);
  // A block whose hold ends while in use is ordinary when released.
  pool.Touch(2);
  pool.ExpireRetention(600);
  pool.Release(2);
  EXPECT_EQ(pool.FreeQueue(), (std::vector<BlockId>{1, 0, 2}));
  EXPECT_EQ(pool.num_retained_blocks(), 0);
}

TEST(RetentionPoolTest, HeldBlocksLeaveOnlyOnceALowerTierHoldsThem) {
  BlockPool pool = CachedPool(3);
  FakeTier tier;
  pool.set_demoter(&tier);
  pool.ExpireRetention(100);
  pool.Retain(0, 1000);
  pool.Retain(1, 2000);
  EXPECT_FALSE(pool.EnsureFree(2));  // the tier holds neither
  tier.holds.insert(H(1));
  ASSERT_TRUE(pool.EnsureFree(2));
  EXPECT_EQ(tier.asked.back(), 2000);  // pinned as long as the hold
  EXPECT_EQ(pool.Allocate(2), (std::vector<BlockId>{2, 1}));  // ordinary first, then the demoted one
  EXPECT_FALSE(pool.Lookup(H(1)).has_value());  // now found in the tier, not the pool
  EXPECT_TRUE(pool.Lookup(H(0)).has_value());
  EXPECT_EQ(pool.num_retained_blocks(), 1);
  // A refreshed hold needs the tier to pin again before the block may leave.
  tier.holds.insert(H(0));
  ASSERT_TRUE(pool.EnsureFree(1));
  pool.Retain(0, 3000);
  EXPECT_EQ(pool.num_free_blocks(), 0);
}

TEST(RetentionLedgerTest, BudgetsPerKeyAndInTotal) {
  RetentionLedger ledger({.per_key_tokens = 32, .max_tokens = 48}, 16);
  const std::vector<BlockHash> ab = {H(1), H(2)}, abc = {H(1), H(2), H(3)}, de = {H(4), H(5)};
  const std::vector<int64_t> t2 = {100, 100}, t3 = {100, 200, 200};
  EXPECT_EQ(ledger.Admit("k1", abc, t3, 0, "f").code(), StatusCode::kInvalidArgument);  // 48 > 32: never
  EXPECT_TRUE(ledger.Admit("k1", ab, t2, 0, "f").ok());
  EXPECT_TRUE(ledger.Admit("k1", ab, t2, 0, "f").ok());  // the same blocks again: counted once
  EXPECT_EQ(ledger.tenant_tokens("k1"), 32);
  const Status full = ledger.Admit("k1", de, t2, 0, "messages[0].cache_control");
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message().rfind("'messages[0].cache_control': ", 0), 0u) << full.message();
  EXPECT_EQ(ledger.Admit("k2", de, t2, 0, "f").code(), StatusCode::kResourceExhausted);  // 64 > 48 in total
  EXPECT_TRUE(ledger.Admit("k2", std::vector<BlockHash>{H(4)}, std::vector<int64_t>{50}, 0, "f").ok());
  EXPECT_EQ(ledger.total_tokens(), 48);
  ledger.Expire(100);  // k1's holds ended (and k2's at 50)
  EXPECT_EQ(ledger.total_tokens(), 0);
  EXPECT_TRUE(ledger.Admit("k2", de, t2, 100, "f").ok());
  RetentionLedger off({.per_key_tokens = -1, .max_tokens = 0}, 16);
  EXPECT_EQ(off.Admit("k", ab, t2, 0, "f").code(), StatusCode::kInvalidArgument);
}

TEST(RetentionLedgerTest, ARefreshedHoldOutlivesItsFirstEnd) {
  RetentionLedger ledger({.per_key_tokens = -1, .max_tokens = 16}, 16);
  const std::vector<BlockHash> a = {H(1)};
  EXPECT_TRUE(ledger.Admit("k", a, std::vector<int64_t>{100}, 0, "f").ok());
  EXPECT_TRUE(ledger.Admit("k", a, std::vector<int64_t>{300}, 50, "f").ok());
  ledger.Expire(200);
  EXPECT_EQ(ledger.total_tokens(), 16);
  ledger.Expire(300);
  EXPECT_EQ(ledger.total_tokens(), 0);
}

// The scheduler: a retained prompt's blocks outlive a flood, its budget is
// enforced at AddRequest, and its hold ends on time.
class RetentionSchedulerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Scheduler> Make(int64_t max_tokens) {
    SchedulerOptions o;
    o.max_num_seqs = 4;
    o.max_num_batched_tokens = 64;
    o.kv = {8, 4, true};
    o.limits.max_model_len = 1 << 10;
    o.limits.vocab_size = 1000;
    o.eos_token_ids = {2};
    o.clock = [this] { return now; };
    o.retention = {.per_key_tokens = 8, .max_tokens = max_tokens};
    auto s = Scheduler::Create(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }
  static Request Req(const std::string& id, int first, int len = 9) {
    Request r;
    r.id = id;
    for (int i = 0; i < len; ++i) r.prompt_token_ids.push_back(10 + first + i);
    r.params.max_tokens = 1;
    return r;
  }
  static void Run(Scheduler& s) {
    while (s.HasUnfinished()) {
      SchedulerOutput plan = s.Schedule();
      std::vector<SampledTokens> sampled;
      for (const ScheduledSequence& ss : plan.seqs) {
        if (ss.sample) sampled.push_back({ss.seq_id, {7}});
      }
      ASSERT_TRUE(s.UpdateFromOutput(sampled).ok());
    }
  }
  int64_t now = 1000;
};

TEST_F(RetentionSchedulerTest, RetainedPrefixSurvivesAFloodAndExpires) {
  auto s = Make(16);
  Request kept = Req("kept", 0);
  kept.retention = {{{8, 500}}, "tenant", "prompt_cache_retention"};
  ASSERT_TRUE(s->AddRequest(kept).ok());
  Run(*s);
  EXPECT_EQ(s->metrics().gauges.retained_blocks, 2);
  for (int i = 0; i < 6; ++i) {  // each needs 3 of the 8 blocks: everything unretained goes
    ASSERT_TRUE(s->AddRequest(Req("flood" + std::to_string(i), 100 * (i + 1))).ok());
    Run(*s);
  }
  PrefixHit hit = s->kv_cache().FindCachedPrefix(
      [&] {
        std::vector<BlockHash> h;
        s->kv_cache().hash_scheme().ExtendBlockHashes(kept.prompt_token_ids, 4, {}, "", &h);
        return h;
      }(),
      9);
  EXPECT_EQ(hit.num_tokens, 8);
  now += 500;  // the hold ends: ordinary LRU again, first to go
  ASSERT_TRUE(s->AddRequest(Req("after", 700)).ok());
  Run(*s);
  EXPECT_EQ(s->metrics().gauges.retained_blocks, 0);
  EXPECT_EQ(s->retention().total_tokens(), 0);
}

TEST_F(RetentionSchedulerTest, BudgetsRefuseWithTheField) {
  auto s = Make(8);
  Request big = Req("big", 0, 13);
  big.retention = {{{12, 500}}, "t1", "messages[0].content[0].cache_control"};
  const Status never = s->AddRequest(big);
  EXPECT_EQ(never.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(never.message().find("'messages[0].content[0].cache_control'"), std::string::npos);
  Request a = Req("a", 0);
  a.retention = {{{8, 500}}, "t1", "f"};
  ASSERT_TRUE(s->AddRequest(a).ok());
  Request b = Req("b", 50);
  b.retention = {{{8, 500}}, "t2", "prompt_cache_retention"};
  EXPECT_EQ(s->AddRequest(b).code(), StatusCode::kResourceExhausted);  // the global budget is taken
  EXPECT_EQ(s->metrics().counters.retention_rejected_full, 1);
  EXPECT_EQ(s->metrics().counters.retention_rejected_too_large, 1);
  Run(*s);
  now += 500;
  ASSERT_TRUE(s->AddRequest(b).ok());  // a's hold ended
}

}  // namespace
}  // namespace tessera
