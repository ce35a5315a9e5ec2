// The planner's search (runtime/sim/plan.h) on a tiny space: its ranking is
// the exhaustive one (each candidate simulated on its own, the best picked by
// hand), data parallelism is the round-robin split of the trace run per
// instance, and the goodput curve scales the trace's rate.
#include "runtime/sim/plan.h"

#include <gtest/gtest.h>

namespace tessera::sim {
namespace {

std::vector<TwinRequest> Trace(int n, int64_t gap_ns, int64_t prompt = 48, int64_t out = 8) {
  std::vector<TwinRequest> t;
  for (int i = 0; i < n; ++i) {
    TwinRequest r;
    r.id = "r" + std::to_string(i);
    for (int64_t k = 0; k < prompt; ++k) r.prompt_token_ids.push_back(static_cast<int32_t>((i * 131 + k) % 997 + 1));
    r.max_tokens = out;
    r.arrival_ns = i * gap_ns;
    t.push_back(std::move(r));
  }
  return t;
}

// Goodput with a TTFT bound alone, in the twin's own terms.
PlanScorer TtftScorer(int64_t ttft_ns) {
  return [ttft_ns](const std::vector<TwinRequestResult>& rs, int64_t end_ns) {
    int64_t good = 0;
    for (const TwinRequestResult& r : rs) {
      if (r.ok && !r.token_ns.empty() && r.token_ns.front() - r.arrival_ns <= ttft_ns) ++good;
    }
    return PlanScore{end_ns > 0 ? static_cast<double>(good) / (static_cast<double>(end_ns) / 1e9) : 0.0,
                     rs.empty() ? 0.0 : static_cast<double>(good) / static_cast<double>(rs.size())};
  };
}

PlanInputs Inputs() {
  PlanInputs in;
  in.scheduler.kv.block_size = 16;
  in.scheduler.limits.max_model_len = 512;
  in.scheduler.limits.vocab_size = 1000;
  LinearCoefficients one, two;
  one.base_ms = 4;
  one.per_prefill_token_ms = 0.2;
  one.per_decode_token_ms = 0.2;
  two.base_ms = 2.5;  // TP 2: faster steps, one instance fewer per budget
  two.per_prefill_token_ms = 0.11;
  two.per_decode_token_ms = 0.11;
  in.tp[1] = {std::make_shared<LinearCostModel>(one), 64};
  in.tp[2] = {std::make_shared<LinearCostModel>(two), 128};
  in.score = TtftScorer(60'000'000);
  return in;
}

TEST(PlanTest, SearchIsTheExhaustiveBest) {
  const PlanInputs in = Inputs();
  const std::vector<TwinRequest> trace = Trace(60, 8'000'000);
  PlanSpace space;
  space.budget = 4;
  space.tensor_parallel_sizes = {1, 2, 3};  // 3 does not divide 4: skipped
  space.max_num_seqs = {2, 16};
  space.max_num_batched_tokens = {32, 256};
  space.max_step_ms = {0, 10};
  const std::vector<PlanCandidate> all = EnumerateCandidates(space);
  ASSERT_EQ(all.size(), 16u);
  for (const PlanCandidate& c : all) EXPECT_EQ(c.tensor_parallel_size * c.data_parallel_size, 4);
  // By hand: every candidate alone, the best by goodput (first on ties).
  double best = -1;
  std::vector<double> goodputs;
  for (const PlanCandidate& c : all) {
    const PlanEval e = SimulateCandidate(c, in, trace).value();
    goodputs.push_back(e.score.goodput_rps);
    best = std::max(best, e.score.goodput_rps);
  }
  const std::vector<PlanEval> ranked = SearchPlans(space, in, trace).value();
  ASSERT_EQ(ranked.size(), all.size());
  EXPECT_EQ(ranked.front().score.goodput_rps, best);
  for (size_t i = 1; i < ranked.size(); ++i) EXPECT_GE(ranked[i - 1].score.goodput_rps, ranked[i].score.goodput_rps);
  // The space is not flat: the settings change the outcome.
  EXPECT_GT(best, *std::min_element(goodputs.begin(), goodputs.end()));
  space.tensor_parallel_sizes = {3};
  EXPECT_FALSE(SearchPlans(space, in, trace).ok());
}

TEST(PlanTest, PdCandidatesAreTheClusterTwinsPdLayout) {
  PlanInputs in = Inputs();
  in.transfer.kv_bytes_per_token = 4096;
  in.prefill_threshold = 32;
  PlanSpace space;
  space.budget = 4;
  space.tensor_parallel_sizes = {1, 2};
  space.max_num_seqs = {8};
  space.max_num_batched_tokens = {256};
  space.max_step_ms = {0};
  space.pd = true;
  // TP 1: unified, 1P+3D, 2P+2D, 3P+1D; TP 2: unified, 1P+1D.
  const std::vector<PlanCandidate> all = EnumerateCandidates(space);
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[2].prefill_instances, 2);
  EXPECT_EQ(all[5].prefill_instances, 1);
  EXPECT_EQ(all[5].tensor_parallel_size, 2);
  const std::vector<TwinRequest> trace = Trace(12, 10'000'000);
  const PlanEval e = SimulateCandidate(all[1], in, trace).value();  // 1 prefill, 3 decode
  ClusterOptions co;
  co.layout = ClusterLayout::kPd;
  co.prefill_instances = 1;
  co.decode_instances = 3;
  co.routing_logic = RoutingLogic::kRoundRobin;
  co.prefill.scheduler = in.scheduler;
  co.prefill.scheduler.max_num_seqs = 8;
  co.prefill.scheduler.max_num_batched_tokens = 256;
  co.prefill.scheduler.kv.num_blocks = 64;
  co.prefill.cost = in.tp.at(1).cost.get();
  co.decode = co.prefill;
  co.transfer = in.transfer;
  co.prefill_threshold = 32;
  const ClusterResult want = RunCluster(co, trace).value();
  EXPECT_GT(want.stats.transfers, 0);
  EXPECT_EQ(e.end_ns, want.stats.end_ns);
  const PlanScore ws = in.score(want.requests, want.stats.end_ns);
  EXPECT_EQ(e.score.goodput_rps, ws.goodput_rps);
  // The transfer costs time: a unified layout of the same instances ends elsewhere.
  EXPECT_NE(SimulateCandidate(all[0], in, trace).value().end_ns, e.end_ns);
  co.prefill_instances = 3;  // the other way round ends elsewhere: the split is honoured
  co.decode_instances = 1;
  EXPECT_NE(RunCluster(co, trace).value().stats.end_ns, e.end_ns);
  PlanCandidate no_decode = all[2];
  no_decode.prefill_instances = 4;
  EXPECT_FALSE(SimulateCandidate(no_decode, in, trace).ok());
}

TEST(PlanTest, DataParallelIsRoundRobinOverTwins) {
  const PlanInputs in = Inputs();
  const std::vector<TwinRequest> trace = Trace(9, 5'000'000);
  const PlanCandidate c{1, 2, 4, 64, 0, 0};
  const PlanEval e = SimulateCandidate(c, in, trace).value();
  // Instance 0 gets requests 0, 2, 4, 6, 8; instance 1 gets 1, 3, 5, 7.
  TwinOptions to;
  to.scheduler = in.scheduler;
  to.scheduler.max_num_seqs = 4;
  to.scheduler.max_num_batched_tokens = 64;
  to.scheduler.kv.num_blocks = 64;
  to.cost = in.tp.at(1).cost.get();
  std::vector<TwinRequest> even, odd;
  for (size_t i = 0; i < trace.size(); ++i) (i % 2 ? odd : even).push_back(trace[i]);
  const TwinResult a = RunTwin(to, even).value(), b = RunTwin(to, odd).value();
  EXPECT_EQ(e.end_ns, std::max(a.stats.end_ns, b.stats.end_ns));
  std::vector<TwinRequestResult> merged;
  for (size_t i = 0; i < trace.size(); ++i) merged.push_back(i % 2 ? b.requests[i / 2] : a.requests[i / 2]);
  const PlanScore want = in.score(merged, e.end_ns);
  EXPECT_EQ(e.score.goodput_rps, want.goodput_rps);
  EXPECT_EQ(e.score.attainment, want.attainment);
  // And not the same as one instance.
  EXPECT_NE(SimulateCandidate({1, 1, 4, 64, 0, 0}, in, trace).value().end_ns, e.end_ns);
}

TEST(PlanTest, CurveScalesTheRate) {
  const PlanInputs in = Inputs();
  const std::vector<TwinRequest> trace = Trace(41, 20'000'000);  // 50 req/s
  const std::vector<TwinRequest> doubled = ScaleArrivals(trace, 2);
  EXPECT_EQ(doubled[3].arrival_ns, 30'000'000);
  const std::vector<CurvePoint> curve = GoodputCurve({1, 1, 8, 256, 0, 0}, in, trace, {0.5, 1, 4, 16}).value();
  ASSERT_EQ(curve.size(), 4u);
  EXPECT_DOUBLE_EQ(curve[1].rate_rps, 50);
  EXPECT_DOUBLE_EQ(curve[3].rate_rps, 800);
  EXPECT_GT(curve[0].score.attainment, curve[3].score.attainment);  // overload misses the TTFT bound
  const double max_rate = MaxRateMeeting(curve, 0.9);
  EXPECT_GE(max_rate, 25);
  EXPECT_LT(max_rate, 800);
  EXPECT_FALSE(GoodputCurve({1, 1, 8, 256, 0, 0}, in, Trace(5, 0), {1}).ok());  // all at once: no rate
}

}  // namespace
}  // namespace tessera::sim
