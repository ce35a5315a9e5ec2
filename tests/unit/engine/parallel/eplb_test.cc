// EPLB map: shape checks, least-loaded replica choice, and balance on measured
// load, including the expert counts of a synthetic model with a skewed router.
#include "engine/parallel/shard/eplb.h"

#include <gtest/gtest.h>

#include <random>

#include "engine/batch_builder.h"
#include "engine/model.h"
#include "engine/parallel/shard/rank_group.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera::parallel {
namespace {

TEST(ExpertMapTest, InitialPlacesEveryExpertAndItsReplicas) {
  auto m = ExpertMap::Initial(4, 8, 4);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->num_slots(), 12);
  EXPECT_EQ(m->slots_per_rank(), 3);
  for (int64_t e = 0; e < 8; ++e) EXPECT_EQ(m->replicas(e).size(), e < 4 ? 2u : 1u) << e;
  EXPECT_FALSE(ExpertMap::Initial(4, 8, 3).ok());  // 11 slots over 4 ranks
}

TEST(EplbConfigTest, ParsesVllmFieldsAndNamesTheBadOne) {
  auto o = ParseEplbConfig(R"({"window_size": 8, "step_interval": 4, "num_redundant_experts": 2,
                               "log_balancedness": true})", {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->window_size, 8);
  EXPECT_EQ(o->step_interval, 4);
  EXPECT_EQ(o->num_redundant_experts, 2);
  EXPECT_TRUE(o->log_balancedness);
  auto bad = ParseEplbConfig(R"({"step_interval": 0})", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'step_interval' must be an integer >= 1"), std::string::npos);
  auto unknown = ParseEplbConfig(R"({"window": 3})", {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown field 'window'"), std::string::npos);
  EXPECT_FALSE(ParseEplbConfig("[1]", {}).ok());
}

TEST(EplbConfigTest, ServeFlagsCombine) {
  auto both = EplbFromFlags(true, R"({"num_redundant_experts": 2})", 4);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("disagree"), std::string::npos);
  auto same = EplbFromFlags(true, R"({"num_redundant_experts": 2})", 2);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->num_redundant_experts, 2);
  auto replicas = EplbFromFlags(false, "", 2);  // static replicas, no rebalancing
  ASSERT_TRUE(replicas.ok());
  EXPECT_TRUE(replicas->uses_map());
  EXPECT_FALSE(replicas->enabled);
  EXPECT_FALSE(EplbFromFlags(false, R"({"window_size": 5})", -1).ok());  // config without --enable-eplb
  GroupOptions g;
  g.tensor_parallel_size = 2;
  g.eplb = *replicas;
  EXPECT_FALSE(ShardOptionsFor(g, 0).ok());  // no --enable-expert-parallel
  g.enable_expert_parallel = true;
  auto so = ShardOptionsFor(g, 1);
  ASSERT_TRUE(so.ok());
  EXPECT_EQ(so->eplb.num_redundant_experts, 2);
}

TEST(ExpertMapTest, ChoosesTheLeastLoadedReplica) {
  auto m = ExpertMap::Initial(2, 2, 2);  // slots: rank 0 {0, 1}, rank 1 {0, 1}
  ASSERT_TRUE(m.ok());
  std::vector<int64_t> pairs(2, 0);
  std::vector<int> ranks;
  for (int i = 0; i < 4; ++i) ranks.push_back(m->RankOfSlot(m->Choose(0, &pairs)));
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 0, 1}));
  pairs = {5, 0};
  EXPECT_EQ(m->RankOfSlot(m->Choose(1, &pairs)), 1);
}

TEST(ExpertMapTest, BalancesSkewedLoad) {
  const std::vector<int64_t> load = {1000, 900, 120, 110, 100, 100, 90, 80};
  auto plain = ExpertMap::Initial(4, 8, 0);
  auto balanced = ExpertMap::Balanced(4, 8, 4, load);
  ASSERT_TRUE(balanced.ok()) << balanced.status().ToString();
  EXPECT_GT(plain->Imbalance(load), 1.5);
  EXPECT_LE(balanced->Imbalance(load), 1.15);
  EXPECT_GE(balanced->replicas(0).size(), 2u);
  for (int64_t e = 0; e < 8; ++e) {  // replicas of one expert sit on different ranks (here <= 4 replicas)
    const auto& r = balanced->replicas(e);
    ASSERT_LE(r.size(), 4u);
    for (size_t i = 1; i < r.size(); ++i) EXPECT_NE(balanced->RankOfSlot(r[i]), balanced->RankOfSlot(r[i - 1]));
  }
}

// The expert counts of a tiny Mixtral whose router favours experts 0 and 1
// (synth --router-skew): 8 experts on 4 ranks with 4 redundant slots.
TEST(ExpertMapTest, BalancesTheSkewedSyntheticRouter) {
  testing::TempDir dir;
  SynthOptions o;
  o.arch = "mixtral";
  o.dtype = DType::kBF16;
  o.out_dir = dir.path();
  o.router_skew = 3.0;
  ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
  auto backend = MakeCpuBackend({.num_threads = 1});
  auto m = Model::Load(dir.path(), backend.get());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto cache = (*m)->CreateKvCache(32, 16);
  BatchBuilder bb(32, 16);
  std::mt19937 rng(3);
  std::vector<BatchBuilder::Chunk> chunks;
  for (int i = 0; i < 4; ++i) {
    chunks.push_back({bb.AddSequence(), testing::RandomTokens(rng, 64, static_cast<int>((*m)->config().vocab_size)),
                      {63}});
  }
  auto batch = bb.Build(chunks);
  ASSERT_TRUE(batch.ok());
  std::vector<float> logits;
  ASSERT_TRUE((*m)->Forward(*batch, cache->get(), &logits).ok());
  auto load = (*m)->ReadExpertLoad();
  ASSERT_TRUE(load.ok());
  for (size_t l = 0; l < load->layers.size(); ++l) {
    std::vector<int64_t> per(load->counts.begin() + l * 8, load->counts.begin() + (l + 1) * 8);
    auto plain = ExpertMap::Initial(4, 8, 0);
    auto balanced = ExpertMap::Balanced(4, 8, 4, per);
    ASSERT_TRUE(balanced.ok());
    EXPECT_GT(plain->Imbalance(per), 1.3) << "layer " << l << ": the router should be skewed";
    EXPECT_LE(balanced->Imbalance(per), 1.15) << "layer " << l;
  }
}

}  // namespace
}  // namespace tessera::parallel
