// The twin (docs/architecture.md, "Twin"): the real Scheduler — admission,
// chunked prefill, the prefix-cached KvCacheManager, preemption, time-bounded
// steps (StepBudget) — driven the way EngineLoop::Step drives it, with the
// model's forward replaced by a CostModel on a virtual clock. The same code as
// serving, no copy: only the time a step takes is modelled.
//
// Per step, in the engine loop's order: requests that arrived by now are added
// (the loop drains its inbox), Schedule(), the clock advances by the cost
// model's time for the plan, every sampled sequence gets one token,
// UpdateFromOutput(), StepBudget::Update with that time. When nothing is left
// to run the clock jumps to the next arrival. Outputs follow ignore_eos
// semantics: a request ends at its max_tokens (or the context length).
//
// One instance, stepped by twin_instance.h; several behind the router's
// policy, and the PD layout, are cluster.h. Not modelled (refused by the
// callers, `tessera simulate`): speculative decoding, KV tiers, multi-rank
// layouts, stop strings, aborts and request timeouts. Single-threaded; no
// wall clock is read.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/sim/cost_model.h"
#include "scheduler/scheduler.h"

namespace tessera::sim {

// Virtual time in nanoseconds; the Scheduler's clock in the twin.
class VirtualClock {
 public:
  int64_t now_ns() const { return now_ns_; }
  void Advance(int64_t ns) { now_ns_ += ns < 0 ? 0 : ns; }
  // Never goes back.
  void AdvanceTo(int64_t ns) { now_ns_ = ns > now_ns_ ? ns : now_ns_; }

 private:
  int64_t now_ns_ = 0;
};

struct TwinRequest {
  std::string id;
  std::vector<int32_t> prompt_token_ids;
  int64_t max_tokens = 1;
  int64_t arrival_ns = 0;  // non-decreasing along the trace
};

struct TwinRequestResult {
  std::string id;
  bool ok = false;
  std::string error;  // refused at admission (never fits, queue full)
  int64_t arrival_ns = 0;
  std::vector<int64_t> token_ns;  // when each output token was delivered (its step's end)
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens found in the prefix cache on admission
  int32_t preemptions = 0;
};

struct TwinStats {
  int64_t steps = 0;     // non-empty steps run
  int64_t end_ns = 0;    // the virtual time when the last request ended
  double kv_usage_mean = 0;  // fraction of KV blocks in use after each step, averaged over steps
  double kv_usage_max = 0;
  SchedulerCounters counters;  // the scheduler's own (preemptions, prefix hits, tokens)
};

struct TwinResult {
  std::vector<TwinRequestResult> requests;  // in trace order
  TwinStats stats;
};

struct TwinOptions {
  // As serving builds them (the clock is replaced by the twin's; KV
  // connectors and lookahead must be empty).
  SchedulerOptions scheduler;
  double max_step_ms = 0;  // time-bounded steps, as EngineLoopOptions::max_step_ms
  // Arrivals while this many requests are unfinished are refused, as the
  // server's admission (--max-pending-requests, 429) does; 0: no bound.
  int64_t max_in_flight = 0;
  const CostModel* cost = nullptr;  // not owned
  // After each non-empty step, before UpdateFromOutput (the plan's sequences
  // are still known to `scheduler`): its plan, shape and time.
  std::function<void(const SchedulerOutput&, const StepShape&, int64_t step_ns, const Scheduler& scheduler)> on_step;
};

// INVALID_ARGUMENT unless arrivals are non-decreasing along `requests`.
Status CheckArrivalOrder(const std::vector<TwinRequest>& requests);

// Runs `requests` (sorted by arrival) to completion. INVALID_ARGUMENT for
// options the twin does not model or unsorted arrivals; INTERNAL if the
// scheduler stops making progress (a bug: it guarantees progress).
StatusOr<TwinResult> RunTwin(TwinOptions options, const std::vector<TwinRequest>& requests);

}  // namespace tessera::sim
