// The scheduler's generic KV connector mechanism with a connector that looks
// up first and is given destination blocks after its answer (kAfterLookup, as
// the KV tiers): which prompt blocks it is asked for, how the answer's blocks
// join the prefix cache, what happens when the request ends or the answer is
// short, and which computed blocks it is offered for saving. Plain ids only.
#include <gtest/gtest.h>

#include "scheduler/scheduler.h"
#include "tests/unit/scheduler/scheduler_steps.h"

namespace tessera {
namespace {

class LookupConnector final : public KvConnector {
 public:
  const char* name() const override { return "lookup"; }
  Allocation allocation() const override { return Allocation::kAfterLookup; }
  bool Offers(const Request& r) const override { return r.cache_salt != "no"; }
  bool OffersAgainAfterPreemption() const override { return true; }
  int64_t MaxBlocks(const Request&) const override { return max_blocks; }
  void OnLoadPlanned(const Request&, const KvLoadPlan& plan) override { planned.push_back(plan); }
  void OnNoLoad(const Request&, KvNoLoad why, int64_t) override { no_load.push_back(why); }
  void OnLoadFinished(const KvLoadPlan&, int64_t loaded, bool ok) override { finished.emplace_back(loaded, ok); }
  bool WantsComputedBlocks() const override { return true; }
  void OnBlocksComputed(const Request&, std::span<const std::pair<BlockId, BlockHash>> blocks) override {
    computed += static_cast<int64_t>(blocks.size());
  }

  int64_t max_blocks = 1 << 20;
  std::vector<KvLoadPlan> planned;
  std::vector<KvNoLoad> no_load;
  std::vector<std::pair<int64_t, bool>> finished;
  int64_t computed = 0;
};

SchedulerOptions Options(KvConnector* c) {
  SchedulerOptions o;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 64;
  o.kv = {32, 4, true};
  o.limits.max_model_len = 1 << 12;
  o.limits.vocab_size = 1000;
  o.kv_connectors = {c};
  return o;
}

Request Req(const std::string& id, int prompt_len, int max_tokens, int first = 10) {
  return testing::ConsecutiveRequest(id, prompt_len, max_tokens, first);
}
using testing::RunAll;

// Blocks leave the process (tiers, PD) under the hashes the scheduler
// computes: those of the configured --prefix-caching-hash-algo, salted.
TEST(KvConnectorTest, LoadPlansCarryTheConfiguredSchemesHashes) {
  for (PrefixHashAlgo algo : {PrefixHashAlgo::kSha256, PrefixHashAlgo::kSha256Cbor}) {
    LookupConnector c;
    SchedulerOptions o = Options(&c);
    o.kv.hash_scheme = BlockHashScheme(algo);
    auto s = std::move(Scheduler::Create(o)).value();
    Request r = Req("a", 9, 1);
    r.cache_salt = "tenant";
    ASSERT_TRUE(s->AddRequest(r).ok());
    s->PlanKvLoads(c);
    ASSERT_EQ(c.planned.size(), 1u);
    std::vector<BlockHash> want;
    BlockHashScheme(algo).ExtendBlockHashes(r.prompt_token_ids, 4, {}, "tenant", &want);
    ASSERT_EQ(c.planned[0].first_block, 0);
    EXPECT_EQ(c.planned[0].hashes, want) << PrefixHashAlgoName(algo);
  }
}

TEST(KvConnectorTest, LookupGetsBlocksPastTheHitAndTheyBecomeAPrefixHit) {
  LookupConnector c;
  auto s = std::move(Scheduler::Create(Options(&c))).value();
  ASSERT_TRUE(s->AddRequest(Req("warm", 8, 1)).ok());
  s->PlanKvLoads(c);  // warm's 8 tokens: 1 full block short of the last token, none cached
  ASSERT_EQ(c.planned.size(), 1u);
  s->FinishKvLoad(c.planned[0].id, false);  // the source has nothing
  RunAll(*s);
  EXPECT_EQ(c.computed, 2);  // warm's two full blocks, offered for saving
  // 17 tokens: 4 full blocks, 2 cached here: the lookup is for blocks 2 and 3.
  ASSERT_TRUE(s->AddRequest(Req("d", 17, 2)).ok());
  s->PlanKvLoads(c);
  ASSERT_EQ(c.planned.size(), 2u);
  const KvLoadPlan& p = c.planned[1];
  EXPECT_EQ(p.first_block, 2);
  EXPECT_EQ(p.hashes.size(), 2u);
  EXPECT_TRUE(p.blocks.empty());  // allocated after the lookup
  EXPECT_TRUE(s->WaitingOnLoadsOnly());
  EXPECT_TRUE(s->Schedule().empty());  // not admitted while the lookup runs
  int64_t first = -1;
  const std::vector<BlockId> blocks = s->AllocateKvLoad(p.id, 2, &first);
  EXPECT_EQ(first, 2);
  EXPECT_EQ(blocks.size(), 2u);
  s->FinishKvLoad(p.id, true);
  ASSERT_EQ(c.finished.size(), 2u);
  EXPECT_EQ(c.finished[1], std::make_pair(int64_t{2}, true));
  SchedulerOutput plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start_position, 16);
  EXPECT_EQ(plan.seqs[0].block_ids[2], blocks[0]);
}

TEST(KvConnectorTest, FailedOrEmptyAnswerComputesThePrompt) {
  LookupConnector c;
  auto s = std::move(Scheduler::Create(Options(&c))).value();
  ASSERT_TRUE(s->AddRequest(Req("d", 17, 2)).ok());
  s->PlanKvLoads(c);
  ASSERT_EQ(c.planned.size(), 1u);
  int64_t first = -1;
  EXPECT_TRUE(s->AllocateKvLoad(c.planned[0].id, 0, &first).empty());  // the source had none
  s->FinishKvLoad(c.planned[0].id, false);
  EXPECT_EQ(s->kv_cache().Usage(), 0.0);
  SchedulerOutput plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start_position, 0);
  s->PlanKvLoads(c);
  EXPECT_EQ(c.planned.size(), 1u);  // asked once per offer
}

TEST(KvConnectorTest, RequestEndedDuringLookupTakesNoBlocks) {
  LookupConnector c;
  auto s = std::move(Scheduler::Create(Options(&c))).value();
  ASSERT_TRUE(s->AddRequest(Req("d", 17, 2)).ok());
  s->PlanKvLoads(c);
  ASSERT_EQ(c.planned.size(), 1u);
  ASSERT_TRUE(s->AbortRequest("d").ok());
  int64_t first = -1;
  EXPECT_TRUE(s->AllocateKvLoad(c.planned[0].id, 4, &first).empty());
  s->FinishKvLoad(c.planned[0].id, true);
  EXPECT_EQ(s->kv_cache().Usage(), 0.0);
  EXPECT_FALSE(s->HasUnfinished());
}

TEST(KvConnectorTest, OffersFollowTheConnectorAndEndWithTheRequest) {
  LookupConnector c;
  auto s = std::move(Scheduler::Create(Options(&c))).value();
  Request no = Req("no", 17, 2);
  no.cache_salt = "no";  // this connector does not offer it
  ASSERT_TRUE(s->AddRequest(std::move(no)).ok());
  ASSERT_TRUE(s->AddRequest(Req("ended", 17, 2)).ok());
  ASSERT_TRUE(s->AbortRequest("ended").ok());
  ASSERT_EQ(c.no_load.size(), 1u);  // the offer ended with the request
  EXPECT_EQ(c.no_load[0], KvNoLoad::kEnded);
  s->PlanKvLoads(c);
  EXPECT_TRUE(c.planned.empty());
  c.max_blocks = 0;  // a source that never holds anything
  ASSERT_TRUE(s->AddRequest(Req("none", 17, 2)).ok());
  s->PlanKvLoads(c);
  EXPECT_TRUE(c.planned.empty());
  ASSERT_EQ(c.no_load.size(), 2u);
  EXPECT_EQ(c.no_load[1], KvNoLoad::kAllCached);
}

}  // namespace
}  // namespace tessera
