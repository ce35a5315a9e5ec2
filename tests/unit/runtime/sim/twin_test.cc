// The twin on its own (runtime/sim/): its virtual clock, the cost models, and
// runs whose times follow from a constant step time by hand.
#include "runtime/sim/twin.h"

#include <gtest/gtest.h>

#include "tests/unit/runtime/sim/sim_test_util.h"

namespace tessera::sim {
namespace {

SchedulerOptions Options(int32_t num_blocks = 64, int64_t budget = 32) {
  return SmallSchedulerOptions(num_blocks, budget);
}

TwinRequest Req(const std::string& id, int64_t prompt, int64_t max_tokens, int64_t arrival_ns, int32_t first = 1) {
  TwinRequest t;
  t.id = id;
  for (int64_t i = 0; i < prompt; ++i) t.prompt_token_ids.push_back(static_cast<int32_t>((first + i) % 1000));
  t.max_tokens = max_tokens;
  t.arrival_ns = arrival_ns;
  return t;
}

TEST(CostModelTest, ShapesTimesAndFiles) {
  auto s = Scheduler::Create(Options(64, 64)).value();
  Request r;
  r.id = "a";
  r.prompt_token_ids.assign(40, 7);
  r.params.max_tokens = 4;
  ASSERT_TRUE(s->AddRequest(r).ok());
  SchedulerOutput plan = s->Schedule();  // a 40-token prefill from 0
  StepShape shape = ShapeOf(plan, *s);
  EXPECT_EQ(shape.num_prefill_seqs, 1);
  EXPECT_EQ(shape.prefill_tokens, 40);
  EXPECT_EQ(shape.prefill_attention, 40 * 41 / 2);
  EXPECT_EQ(shape.num_decode_seqs, 0);
  ASSERT_TRUE(s->UpdateFromOutput(std::vector<SampledTokens>{{plan.seqs[0].seq_id, {3}}}).ok());
  plan = s->Schedule();  // its first decode: position 40, context 41
  shape = ShapeOf(plan, *s);
  EXPECT_EQ(shape.num_prefill_seqs, 0);
  EXPECT_EQ(shape.num_decode_seqs, 1);
  EXPECT_EQ(shape.decode_tokens, 1);
  EXPECT_EQ(shape.decode_context, 41);

  auto m = LinearCostModel::FromJson(
      R"({"model": "linear", "base_ms": 1, "per_prefill_token_ms": 0.5, "per_prefill_attention_ms": 0.001,
          "per_decode_seq_ms": 2, "per_decode_token_ms": 0.25, "per_decode_context_ms": 0.01})", "t");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  StepShape x;
  x.prefill_tokens = 10;
  x.prefill_attention = 1000;
  x.num_decode_seqs = 2;
  x.decode_tokens = 2;
  x.decode_context = 100;
  EXPECT_EQ(m->StepNs(x), 1'000'000 + 5'000'000 + 1'000'000 + 4'000'000 + 500'000 + 1'000'000);
  EXPECT_EQ(LinearCostModel(LinearCoefficients{}).StepNs(x), 1);  // a step takes time

  // File errors name the key.
  auto unknown = LinearCostModel::FromJson(R"({"model": "linear", "base_msec": 1})", "f.json");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'base_msec'"), std::string::npos);
  auto negative = LinearCostModel::FromJson(R"({"model": "linear", "per_decode_seq_ms": -1})", "f.json");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("'per_decode_seq_ms'"), std::string::npos);
  EXPECT_FALSE(LinearCostModel::FromJson(R"({"base_ms": 1})", "f.json").ok());  // no "model"
  EXPECT_FALSE(LinearCostModel::FromJson("[1]", "f.json").ok());

  // Replay: by ordinal, the last time past the end.
  ReplayCostModel replay({5, 7});
  StepShape y;
  EXPECT_EQ(replay.StepNs(y), 5);
  y.ordinal = 1;
  EXPECT_EQ(replay.StepNs(y), 7);
  y.ordinal = 9;
  EXPECT_EQ(replay.StepNs(y), 7);
}

// The virtual clock; then one request, 40 prompt tokens, budget 32 tokens a
// step, 1 ms a step: a
// 32-token chunk, then 8 tokens and the first output token (2 ms), then one
// token per decode step.
TEST(TwinTest, ClockAndTimesFollowFromTheSteps) {
  VirtualClock c;
  EXPECT_EQ(c.now_ns(), 0);
  c.Advance(5);
  c.AdvanceTo(3);
  EXPECT_EQ(c.now_ns(), 5);
  c.AdvanceTo(12);
  c.Advance(-4);
  EXPECT_EQ(c.now_ns(), 12);

  ConstantCostModel cost(1'000'000);
  TwinOptions o;
  o.scheduler = Options();
  o.cost = &cost;
  auto r = RunTwin(o, {Req("a", 40, 4, 3'000'000)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TwinRequestResult& a = r->requests[0];
  ASSERT_TRUE(a.ok) << a.error;
  EXPECT_EQ(a.token_ns, (std::vector<int64_t>{5'000'000, 6'000'000, 7'000'000, 8'000'000}));
  EXPECT_EQ(r->stats.steps, 5);
  EXPECT_EQ(r->stats.end_ns, 8'000'000);  // the clock jumped to the arrival, then 5 steps
}

TEST(TwinTest, PreemptsHitsPrefixesAndRefusesLikeServing) {
  ConstantCostModel cost(1'000'000);
  TwinOptions o;
  o.scheduler = Options(/*num_blocks=*/8, /*budget=*/64);  // 128 tokens
  o.cost = &cost;
  std::vector<TwinRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(Req("p" + std::to_string(i), 48, 40, 0, 1));  // one shared prompt
  reqs.push_back(Req("huge", 200, 10, 0));  // can never fit: refused at admission
  auto r = RunTwin(o, reqs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(r->requests[i].ok) << r->requests[i].error;
  EXPECT_EQ(r->requests[0].token_ns.size(), 40u);
  EXPECT_FALSE(r->requests[4].ok);
  EXPECT_FALSE(r->requests[4].error.empty());
  EXPECT_GT(r->stats.counters.preemptions, 0);
  EXPECT_GT(r->stats.counters.prefix_cache_hits, 0);
  EXPECT_GT(r->stats.kv_usage_max, 0.9);
  // Deterministic: the same run gives the same times.
  auto again = RunTwin(o, reqs);
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(again->requests[i].token_ns, r->requests[i].token_ns);

  // What the twin does not model is refused.
  o.scheduler = Options();
  o.scheduler.num_lookahead_tokens = 2;
  EXPECT_FALSE(RunTwin(o, {}).ok());
  o.scheduler.num_lookahead_tokens = 0;
  EXPECT_FALSE(RunTwin(o, {Req("a", 4, 1, 10), Req("b", 4, 1, 5)}).ok());  // unsorted arrivals
  o.cost = nullptr;
  EXPECT_FALSE(RunTwin(o, {}).ok());
}

}  // namespace
}  // namespace tessera::sim
