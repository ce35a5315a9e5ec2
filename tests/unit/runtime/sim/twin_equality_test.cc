// The twin's decision equality (docs/architecture.md, "Twin"): the real engine
// loop runs a tiny synthetic model on a recorded arrival sequence (requests
// submitted before given steps) with time-bounded steps, a KV pool small
// enough to preempt, chunked prefill and shared prefixes; it logs each step's
// plan and measured time. The twin, fed those measured times, replays the same
// arrivals and must plan the same steps: the same sequences admitted, the same
// chunk sizes and positions, the same decodes, the same preemptions.
#include <algorithm>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

#include "runtime/engine_loop.h"
#include "runtime/sim/twin.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera::sim {
namespace {

using testing::MakeTinyModel;
using testing::RandomTokens;
using testing::TempDir;

// One step's decisions: each scheduled sequence (id, request, first position,
// tokens, sampled) in batch order, and the sequences preempted.
struct StepLog {
  std::vector<std::tuple<SeqId, std::string, int64_t, size_t, bool>> seqs;
  std::vector<SeqId> preempted;
  bool operator==(const StepLog&) const = default;
};

StepLog LogOf(const SchedulerOutput& plan) {
  StepLog log;
  for (const ScheduledSequence& s : plan.seqs) {
    log.seqs.emplace_back(s.seq_id, s.request_id, s.start_position, s.token_ids.size(), s.sample);
  }
  log.preempted = plan.preempted;
  return log;
}

std::string Describe(const StepLog& log) {
  std::string out;
  for (const auto& [id, req, start, n, sample] : log.seqs) {
    out += req + "@" + std::to_string(start) + "+" + std::to_string(n) + (sample ? "s " : " ");
  }
  for (SeqId p : log.preempted) out += "preempt:" + std::to_string(p) + " ";
  return out;
}

struct Recorded {
  std::vector<StepLog> steps;
  std::vector<int64_t> times;
  SchedulerMetrics metrics;
  SchedulerOptions scheduler;
};

// Runs `trace` on a real engine loop, request i submitted before step
// arrive[i]; sets each request's arrival_ns to the virtual time of that step
// (the measured times of the steps before it).
Recorded RunRecorded(EngineLoopOptions o, std::vector<TwinRequest>& trace, const std::vector<int>& arrive) {
  Recorded rec;
  o.on_step = [&](const SchedulerOutput& plan, const StepShape&, int64_t ns) {
    rec.steps.push_back(LogOf(plan));
    rec.times.push_back(ns);
  };
  auto loop = EngineLoop::Create(o);
  EXPECT_TRUE(loop.ok()) << loop.status().ToString();
  if (!loop.ok()) return rec;
  std::vector<RequestStreamPtr> streams;
  for (size_t next = 0, step = 0; step < 5000; ++step) {
    for (; next < trace.size() && arrive[next] <= static_cast<int>(step); ++next) {
      trace[next].arrival_ns = 0;
      for (int64_t t : rec.times) trace[next].arrival_ns += t;
      Request r;
      r.id = trace[next].id;
      r.prompt_token_ids = trace[next].prompt_token_ids;
      r.params.max_tokens = static_cast<int32_t>(trace[next].max_tokens);
      r.params.ignore_eos = true;
      auto s = (*loop)->Submit(std::move(r));
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (s.ok()) streams.push_back(*s);
    }
    bool done = next == trace.size();
    for (const RequestStreamPtr& s : streams) done = done && s->finished();
    if (done) break;
    EXPECT_TRUE((*loop)->Step().ok());
  }
  rec.metrics = (*loop)->metrics();
  rec.scheduler = (*loop)->scheduler_options();
  return rec;
}

std::vector<StepLog> RunTwinLogs(const Recorded& rec, double max_step_ms, const std::vector<int64_t>& times,
                                 const std::vector<TwinRequest>& trace, SchedulerCounters* counters = nullptr) {
  ReplayCostModel replay(times);
  TwinOptions to;
  to.scheduler = rec.scheduler;
  to.max_step_ms = max_step_ms;
  to.cost = &replay;
  std::vector<StepLog> logs;
  to.on_step = [&](const SchedulerOutput& plan, const StepShape&, int64_t, const Scheduler&) {
    logs.push_back(LogOf(plan));
  };
  auto result = RunTwin(to, trace);
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  if (result.ok()) {
    for (const TwinRequestResult& r : result->requests) EXPECT_TRUE(r.ok) << r.id << ": " << r.error;
    if (counters) *counters = result->stats.counters;
  }
  return logs;
}

TEST(TwinEqualityTest, SameDecisionsAsTheEngineLoopFromItsMeasuredStepTimes) {
  TempDir dir;
  MakeTinyModel(dir.path(), "qwen3", DType::kF32);
  EngineLoopOptions o;
  o.model_dir = dir.path();
  o.num_threads = 2;
  o.scheduler.max_num_seqs = 4;
  o.scheduler.max_num_batched_tokens = 256;
  o.scheduler.kv.num_blocks = 10;  // 160 tokens: two long requests fill it
  o.scheduler.kv.block_size = 16;
  const int vocab = 1000;  // below the tiny model's vocabulary

  // The recorded arrival sequence: request i is submitted before real step arrive[i].
  std::mt19937 rng(7);
  const std::vector<int> arrive = {0, 0, 0, 1, 2, 4, 4, 7, 11, 11, 16, 30};
  const std::vector<int32_t> prefix = RandomTokens(rng, 32, vocab);
  std::vector<TwinRequest> trace;
  for (size_t i = 0; i < arrive.size(); ++i) {
    TwinRequest t;
    t.id = "r" + std::to_string(i);
    if (i % 3 == 0) t.prompt_token_ids = prefix;  // shared prefix: prefix-cache hits
    const std::vector<int32_t> rest = RandomTokens(rng, 20 + static_cast<int>(i * 7 % 45), vocab);
    t.prompt_token_ids.insert(t.prompt_token_ids.end(), rest.begin(), rest.end());
    t.max_tokens = 6 + static_cast<int64_t>(i * 5 % 14);
    trace.push_back(std::move(t));
  }
  // This machine's time per token (untimed steps after the first, which runs
  // cold), so the time bound below lands at ~16-token steps: it then cuts
  // prompts (up to 98 tokens) into chunks by measured time, even if the load
  // changes the speed several times over.
  std::vector<TwinRequest> warm = trace;
  const Recorded untimed = RunRecorded(o, warm, std::vector<int>(trace.size(), 0));
  int64_t tokens = 0, ns = 0;
  for (size_t i = 1; i < untimed.steps.size(); ++i) {  // as StepBudget: steps of 16 tokens or more
    int64_t n = 0;
    for (const auto& s : untimed.steps[i].seqs) n += static_cast<int64_t>(std::get<3>(s));
    if (n < Scheduler::kMinStepPrefillTokens) continue;
    tokens += n;
    ns += untimed.times[i];
  }
  ASSERT_GT(tokens, 0);
  o.max_step_ms = 16.0 * static_cast<double>(ns) / static_cast<double>(tokens) / 1e6;

  const Recorded real = RunRecorded(o, trace, arrive);
  // The run exercised what the twin must reproduce.
  ASSERT_GT(real.metrics.counters.preemptions, 0);
  ASSERT_GT(real.metrics.counters.prefix_cache_hits, 0);
  bool partial_chunk = false;
  for (const StepLog& l : real.steps) {
    for (const auto& s : l.seqs) partial_chunk |= !std::get<4>(s);
  }
  ASSERT_TRUE(partial_chunk) << "no chunked prefill";

  SchedulerCounters c;
  const std::vector<StepLog> twin = RunTwinLogs(real, o.max_step_ms, real.times, trace, &c);
  ASSERT_EQ(twin.size(), real.steps.size());
  for (size_t i = 0; i < twin.size(); ++i) {
    ASSERT_EQ(twin[i], real.steps[i]) << "step " << i << "\n real: " << Describe(real.steps[i])
                                      << "\n twin: " << Describe(twin[i]);
  }
  EXPECT_EQ(c.preemptions, real.metrics.counters.preemptions);
  EXPECT_EQ(c.prefix_cache_hits, real.metrics.counters.prefix_cache_hits);

  // The times decide: the same arrivals with steps 20 times shorter plan
  // differently (whole prompts in a step where the real run cut them).
  std::vector<int64_t> faster = real.times;
  for (int64_t& t : faster) t = std::max<int64_t>(t / 20, 1);
  EXPECT_NE(RunTwinLogs(real, o.max_step_ms, faster, trace), real.steps);
}

}  // namespace
}  // namespace tessera::sim
