// The cache waterfall (scheduler/cache_waterfall.h): on a sequence's first
// admission the scheduler accounts every prompt token, cached ones by where
// they came from (the pool, a KV connector's named source), computed ones by
// why (never seen, evicted, a connector's reason, the uncacheable tail). The
// sums always hold: cached = the request's cached tokens, cached + computed =
// the prompt.
#include <gtest/gtest.h>

#include "scheduler/cache_waterfall.h"
#include "scheduler/scheduler.h"
#include "tests/unit/scheduler/scheduler_steps.h"

namespace tessera {
namespace {

// Looks up first (as the KV tiers); says why a block it names was not found.
class SourceConnector final : public KvConnector {
 public:
  const char* name() const override { return "source"; }
  Allocation allocation() const override { return Allocation::kAfterLookup; }
  bool Offers(const Request& r) const override { return r.cache_salt != "no"; }
  int64_t MaxBlocks(const Request&) const override { return 1 << 20; }
  void OnLoadPlanned(const Request&, const KvLoadPlan& plan) override { planned.push_back(plan); }
  std::optional<ComputeReason> MissReason(const BlockHash& h) const override {
    return h == not_written ? std::optional(ComputeReason::kNotWritten) : std::nullopt;
  }
  std::vector<KvLoadPlan> planned;
  BlockHash not_written;
};

SchedulerOptions Options(int32_t num_blocks, KvConnector* c = nullptr) {
  SchedulerOptions o;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 64;
  o.kv = {num_blocks, 4, true};
  o.limits.max_model_len = 1 << 12;
  o.limits.vocab_size = 1000;
  if (c != nullptr) o.kv_connectors = {c};
  return o;
}

Request Req(const std::string& id, int prompt_len, int first = 10) {
  Request r = testing::ConsecutiveRequest(id, prompt_len, 1, first);
  r.cache_salt = "no";  // SourceConnector stays out unless a test clears it
  return r;
}

// Runs `s` to the end; the waterfall and cached count of request `id`'s first output.
std::pair<CacheWaterfall, int64_t> RunToEnd(Scheduler& s, const std::string& id) {
  std::pair<CacheWaterfall, int64_t> got{{}, -1};
  for (int i = 0; i < 100 && s.HasUnfinished(); ++i) {
    SchedulerOutput plan = s.Schedule();
    std::vector<SampledTokens> sampled;
    for (const ScheduledSequence& ss : plan.seqs) {
      if (ss.sample) sampled.push_back({ss.seq_id, {7}});
    }
    auto outs = s.UpdateFromOutput(sampled);
    EXPECT_TRUE(outs.ok());
    for (const SequenceOutput& o : *outs) {
      if (o.request_id == id && got.second < 0) got = {o.cache_waterfall, o.num_cached_tokens};
    }
  }
  return got;
}

CacheWaterfall Expect(std::initializer_list<std::pair<CacheSource, int64_t>> cached,
                      std::initializer_list<std::pair<ComputeReason, int64_t>> computed) {
  CacheWaterfall w;
  for (auto [s, n] : cached) w[s] = n;
  for (auto [r, n] : computed) w[r] = n;
  return w;
}

TEST(CacheWaterfallTest, FirstSightIsNoPrefixThenThePoolServesIt) {
  auto s = std::move(Scheduler::Create(Options(32))).value();
  ASSERT_TRUE(s->AddRequest(Req("a", 18)).ok());
  auto [first, cached_first] = RunToEnd(*s, "a");
  EXPECT_EQ(first, Expect({}, {{ComputeReason::kNoPrefix, 16}, {ComputeReason::kTail, 2}}));
  EXPECT_EQ(cached_first, 0);
  ASSERT_TRUE(s->AddRequest(Req("b", 18)).ok());
  auto [again, cached_again] = RunToEnd(*s, "b");
  EXPECT_EQ(again, Expect({{CacheSource::kPool, 16}}, {{ComputeReason::kTail, 2}}));
  EXPECT_EQ(again.cached_total(), cached_again);
  EXPECT_EQ(again.cached_total() + again.computed_total(), 18);
}

// 16 tokens = 4 full blocks: the last is in the pool but recomputed, since
// the final token's logits give the first output token.
TEST(CacheWaterfallTest, TheLastFullBlockOfAFullyCachedPromptIsTail) {
  auto s = std::move(Scheduler::Create(Options(32))).value();
  ASSERT_TRUE(s->AddRequest(Req("a", 16)).ok());
  RunToEnd(*s, "a");
  ASSERT_TRUE(s->AddRequest(Req("b", 16)).ok());
  EXPECT_EQ(RunToEnd(*s, "b").first, Expect({{CacheSource::kPool, 12}}, {{ComputeReason::kTail, 4}}));
}

TEST(CacheWaterfallTest, BlocksEvictedByOtherPromptsAreEvicted) {
  auto s = std::move(Scheduler::Create(Options(16))).value();
  ASSERT_TRUE(s->AddRequest(Req("a", 18)).ok());
  RunToEnd(*s, "a");
  for (int i = 0; i < 3; ++i) {  // 3 x 15 distinct full blocks through a 16-block pool
    ASSERT_TRUE(s->AddRequest(Req("flood" + std::to_string(i), 60, 100 + 60 * i)).ok());
    RunToEnd(*s, "");
  }
  ASSERT_TRUE(s->AddRequest(Req("b", 18)).ok());
  auto [w, cached] = RunToEnd(*s, "b");
  EXPECT_EQ(w, Expect({}, {{ComputeReason::kEvicted, 16}, {ComputeReason::kTail, 2}}));
  EXPECT_EQ(cached, 0);
}

TEST(CacheWaterfallTest, LoadedBlocksCountAsTheirSourceAndMissesTakeTheConnectorsReason) {
  SourceConnector c;
  auto s = std::move(Scheduler::Create(Options(32, &c))).value();
  Request d = Req("d", 21);  // 5 full blocks + 1
  d.cache_salt = "";
  std::vector<BlockHash> hashes;
  s->kv_cache().hash_scheme().ExtendBlockHashes(d.prompt_token_ids, 4, {}, "", &hashes);
  c.not_written = hashes[4];
  Request warm = Req("warm2", 9);  // blocks 0 and 1 in the pool
  warm.cache_salt = "";
  ASSERT_TRUE(s->AddRequest(warm).ok());
  s->PlanKvLoads(c);
  ASSERT_EQ(c.planned.size(), 1u);
  s->FinishKvLoad(c.planned[0].id, false);
  RunToEnd(*s, "warm2");
  ASSERT_TRUE(s->AddRequest(d).ok());
  s->PlanKvLoads(c);
  ASSERT_EQ(c.planned.size(), 2u);
  const KvLoadPlan& p = c.planned[1];
  ASSERT_EQ(p.first_block, 2);
  int64_t first = -1;
  ASSERT_EQ(s->AllocateKvLoad(p.id, 2, &first).size(), 2u);  // blocks 2, 3; block 4 is in no source
  const std::vector<CacheSource> sources = {CacheSource::kDisk, CacheSource::kRedis};
  s->FinishKvLoad(p.id, true, sources);
  auto [w, cached] = RunToEnd(*s, "d");
  EXPECT_EQ(w, Expect({{CacheSource::kPool, 8}, {CacheSource::kDisk, 4}, {CacheSource::kRedis, 4}},
                      {{ComputeReason::kNotWritten, 4}, {ComputeReason::kTail, 1}}));
  EXPECT_EQ(cached, 16);
}

TEST(CacheWaterfallTest, ALoadWithoutNamedSourcesTakesTheConnectorsSource) {
  SourceConnector c;
  auto s = std::move(Scheduler::Create(Options(32, &c))).value();
  Request d = Req("d", 9);
  d.cache_salt = "";
  ASSERT_TRUE(s->AddRequest(d).ok());
  s->PlanKvLoads(c);
  ASSERT_EQ(c.planned.size(), 1u);
  int64_t first = -1;
  ASSERT_EQ(s->AllocateKvLoad(c.planned[0].id, 2, &first).size(), 2u);
  s->FinishKvLoad(c.planned[0].id, true);
  EXPECT_EQ(RunToEnd(*s, "d").first, Expect({{CacheSource::kPeer, 8}}, {{ComputeReason::kTail, 1}}));
}

TEST(CacheWaterfallTest, RecentBlockHashesForgetTheOldestPastCapacity) {
  RecentBlockHashes r(2);
  BlockHash a, b, c;
  a.digest[0] = 1;
  b.digest[0] = 2;
  c.digest[0] = 3;
  r.Insert(a);
  r.Insert(b);
  r.Insert(a);  // already there: keeps its place
  r.Insert(c);
  EXPECT_FALSE(r.Contains(a));
  EXPECT_TRUE(r.Contains(b));
  EXPECT_TRUE(r.Contains(c));
  r.Erase(b);
  EXPECT_FALSE(r.Contains(b));
  EXPECT_EQ(r.size(), 1u);
}

TEST(CacheWaterfallTest, NamesAreTheDocumentedOnes) {
  EXPECT_EQ(CacheSourceName(CacheSource::kRedis), "redis");
  EXPECT_EQ(ComputeReasonName(ComputeReason::kRoutedElsewhere), "routed_elsewhere");
  EXPECT_EQ(CacheSourceOfTier("disk"), CacheSource::kDisk);
  EXPECT_EQ(CacheSourceOfTier("mem"), std::nullopt);
}

}  // namespace
}  // namespace tessera
