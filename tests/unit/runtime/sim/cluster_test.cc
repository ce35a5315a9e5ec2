// The twin's cluster layouts (runtime/sim/cluster.h): one instance is RunTwin,
// the router's policies place requests as the router would, and a PD run's
// times follow from a constant step time and the transfer model by hand.
#include "runtime/sim/cluster.h"

#include <gtest/gtest.h>

#include "tests/unit/runtime/sim/sim_test_util.h"

namespace tessera::sim {
namespace {

constexpr int64_t kMs = 1'000'000;

SchedulerOptions Options(int32_t num_blocks = 64, int64_t budget = 64) {
  return SmallSchedulerOptions(num_blocks, budget);
}

// `prompt` tokens: `shared` of them from the prefix numbered `prefix`, the rest unique to `id`.
TwinRequest Req(const std::string& id, int64_t prompt, int64_t max_tokens, int64_t arrival_ns, int32_t prefix = 0,
                int64_t shared = 0) {
  TwinRequest t;
  t.id = id;
  for (int64_t i = 0; i < prompt; ++i) {
    const int64_t v = i < shared ? prefix * 100 + i : 500 + (static_cast<int64_t>(std::hash<std::string>()(id)) + i);
    t.prompt_token_ids.push_back(static_cast<int32_t>((v % 1000 + 1000) % 1000));
  }
  t.max_tokens = max_tokens;
  t.arrival_ns = arrival_ns;
  return t;
}

ClusterOptions Unified(int32_t n, RoutingLogic logic, const CostModel* cost, int32_t num_blocks = 64) {
  ClusterOptions o;
  o.instances = n;
  o.routing_logic = logic;
  o.unified.scheduler = Options(num_blocks);
  o.unified.cost = cost;
  return o;
}

TEST(ClusterTest, OneInstanceIsRunTwin) {
  // A tight pool (preemptions), chunked prefills, shared prefixes, bursts and gaps.
  LinearCostModel cost(LinearCoefficients{.base_ms = 3, .per_prefill_token_ms = 0.2, .per_decode_seq_ms = 1,
                                          .per_decode_context_ms = 0.01});
  std::vector<TwinRequest> reqs;
  for (int i = 0; i < 24; ++i) {
    reqs.push_back(Req("r" + std::to_string(i), 40 + (i * 7) % 50, 5 + i % 9, (i / 4) * 30 * kMs, i % 3, 32));
  }
  TwinOptions to;
  to.scheduler = Options(24, 48);
  to.cost = &cost;
  auto twin = RunTwin(to, reqs);
  ASSERT_TRUE(twin.ok()) << twin.status().ToString();
  ClusterOptions co = Unified(1, RoutingLogic::kKvAware, &cost);
  co.unified = to;
  auto cluster = RunCluster(co, reqs);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  ASSERT_GT(twin->stats.counters.preemptions, 0);  // the case exercises preemption
  ASSERT_EQ(cluster->requests.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(cluster->requests[i].token_ns, twin->requests[i].token_ns) << reqs[i].id;
    EXPECT_EQ(cluster->requests[i].cached_tokens, twin->requests[i].cached_tokens) << reqs[i].id;
    EXPECT_EQ(cluster->requests[i].preemptions, twin->requests[i].preemptions) << reqs[i].id;
    EXPECT_TRUE(cluster->requests[i].ok);
  }
  EXPECT_EQ(cluster->instances.at(0).stats.steps, twin->stats.steps);
  EXPECT_EQ(cluster->stats.end_ns, twin->stats.end_ns);
  EXPECT_EQ(cluster->stats.preemptions, twin->stats.counters.preemptions);
}

TEST(ClusterTest, RoundRobinAndLoadSpread) {
  ConstantCostModel cost(10 * kMs);
  std::vector<TwinRequest> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(Req("r" + std::to_string(i), 20, 4, i * kMs));
  auto rr = RunCluster(Unified(3, RoutingLogic::kRoundRobin, &cost), reqs);
  ASSERT_TRUE(rr.ok()) << rr.status().ToString();
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(rr->routes[i].instance, static_cast<int32_t>(i % 3));
  for (const ClusterInstanceStats& s : rr->instances) EXPECT_EQ(s.requests, 2);

  // Load: two at once go to different instances; a third, after the first
  // instance finished, to that idle one (the first on ties).
  std::vector<TwinRequest> burst = {Req("a", 20, 2, 0), Req("b", 20, 50, 0), Req("c", 20, 2, 100 * kMs)};
  auto load = RunCluster(Unified(2, RoutingLogic::kLoad, &cost), burst);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ(load->routes[0].instance, 0);
  EXPECT_EQ(load->routes[1].instance, 1);
  EXPECT_EQ(load->routes[2].instance, 0);  // instance 1 still decodes b
}

TEST(ClusterTest, KvAwareSendsASharedPrefixToItsHolder) {
  ConstantCostModel cost(10 * kMs);
  // a (prefix 1) and b (prefix 2) land on different instances; 2 s later c,
  // sharing b's 64-token prefix, goes where b's blocks are cached — where
  // load or round-robin would send it to instance 0.
  std::vector<TwinRequest> reqs = {Req("a", 80, 2, 0, 1, 64), Req("b", 80, 2, 0, 2, 64),
                                   Req("c", 80, 2, 2000 * kMs, 2, 64)};
  auto kv = RunCluster(Unified(2, RoutingLogic::kKvAware, &cost), reqs);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_EQ(kv->routes[0].instance, 0);
  EXPECT_EQ(kv->routes[1].instance, 1);
  EXPECT_EQ(kv->routes[2].instance, 1);
  EXPECT_EQ(kv->routes[2].hit_tokens, 64);
  EXPECT_EQ(kv->requests[2].cached_tokens, 64);  // the instance's prefix cache agrees
  EXPECT_EQ(kv->stats.router_hit_tokens, 64);
  auto load = RunCluster(Unified(2, RoutingLogic::kLoad, &cost), reqs);
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load->routes[2].instance, 0);
  EXPECT_EQ(load->requests[2].cached_tokens, 0);
}

TEST(ClusterTest, PdByHand) {
  ConstantCostModel cost(10 * kMs);
  ClusterOptions o;
  o.layout = ClusterLayout::kPd;
  o.prefill.scheduler = Options();
  o.decode.scheduler = Options();
  o.prefill.cost = o.decode.cost = &cost;
  o.prefill_threshold = 16;
  o.transfer.kv_bytes_per_token = 1000;
  o.transfer.bandwidth_gb_s = 1;  // a byte per ns
  o.transfer.latency_ms = 2;
  // p: 40 tokens, prefilled; s: 8 tokens, below the threshold, straight to decode at 100 ms.
  std::vector<TwinRequest> reqs = {Req("p", 40, 3, 0), Req("s", 8, 2, 100 * kMs)};
  auto pd = RunCluster(o, reqs);
  ASSERT_TRUE(pd.ok()) << pd.status().ToString();
  // Prefill step 0..10 ms; the decode pulls the 2 full blocks (never the last
  // prompt token's): 2 x 16 x 1000 bytes = 32 us + 2 ms, 10..12.032 ms; then
  // computes tokens 32..39 and samples: first token at 22.032 ms, then a
  // token per 10 ms step.
  const int64_t pulled = 12 * kMs + 32'000;
  const ClusterRoute& r = pd->routes[0];
  EXPECT_EQ(r.prefill_instance, 0);
  EXPECT_EQ(r.instance, 0);
  EXPECT_EQ(r.transfer_bytes, 32000);
  EXPECT_EQ(r.transfer_start_ns, 10 * kMs);
  EXPECT_EQ(r.transfer_end_ns, pulled);
  EXPECT_EQ(pd->requests[0].token_ns, (std::vector<int64_t>{pulled + 10 * kMs, pulled + 20 * kMs, pulled + 30 * kMs}));
  EXPECT_EQ(pd->requests[0].cached_tokens, 32);
  EXPECT_TRUE(pd->requests[0].ok);
  EXPECT_EQ(pd->routes[1].prefill_instance, -1);
  EXPECT_EQ(pd->routes[1].transfer_bytes, 0);
  EXPECT_EQ(pd->requests[1].token_ns, (std::vector<int64_t>{110 * kMs, 120 * kMs}));
  EXPECT_EQ(pd->stats.transfers, 1);
  EXPECT_EQ(pd->stats.transfer_bytes, 32000);
  ASSERT_EQ(pd->instances.size(), 2u);
  EXPECT_EQ(pd->instances[0].role, "prefill");
  EXPECT_EQ(pd->instances[0].requests, 1);
  EXPECT_EQ(pd->instances[1].role, "decode");
  EXPECT_EQ(pd->instances[1].pulls, 1);

  // Refusals name what is missing.
  o.transfer.kv_bytes_per_token = 0;
  EXPECT_FALSE(RunCluster(o, reqs).ok());
  EXPECT_FALSE(RunCluster(Unified(0, RoutingLogic::kLoad, &cost), reqs).ok());
}

TEST(ClusterTest, PdPrefillWaitsForItsHeldBlocksToBeReleased) {
  // A 6-block prefill pool: each 40-token prompt takes 3 blocks and holds 2
  // until its pull ends (100 ms each, one at a time), so the third prefill
  // waits for the first release.
  ConstantCostModel cost(10 * kMs);
  ClusterOptions o;
  o.layout = ClusterLayout::kPd;
  o.prefill.scheduler = Options(6);
  o.decode.scheduler = Options();
  o.prefill.cost = o.decode.cost = &cost;
  o.prefill_threshold = 16;
  o.transfer.kv_bytes_per_token = 1;
  o.transfer.latency_ms = 100;
  std::vector<TwinRequest> reqs = {Req("a", 40, 2, 0), Req("b", 40, 2, 0), Req("c", 40, 2, 0)};
  auto pd = RunCluster(o, reqs);
  ASSERT_TRUE(pd.ok()) << pd.status().ToString();
  for (const TwinRequestResult& r : pd->requests) EXPECT_TRUE(r.ok) << r.id << ": " << r.error;
  EXPECT_EQ(pd->stats.transfers, 3);
  const int64_t first_release = pd->routes[0].transfer_end_ns;
  EXPECT_GT(pd->routes[2].transfer_start_ns, first_release);  // c was prefilled after a's blocks were freed
}

}  // namespace
}  // namespace tessera::sim
