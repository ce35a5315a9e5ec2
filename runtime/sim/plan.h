// The deployment planner's search (`tessera plan`; docs/architecture.md,
// "Twin"): candidates — TP degree, data-parallel instances, the scheduler's
// batch limits and time-bounded steps — each simulated by the twin on the
// same trace, ranked by goodput (requests/s meeting the SLOs), and the best
// ones' goodput over scaled arrival rates. Every evaluation goes through
// SimulateCandidate, the one place a layout is simulated.
//
// The search is exhaustive over the grid (it is small: a few dozen
// candidates, each a twin run). Single-threaded; no wall clock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/sim/cluster.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/twin.h"
#include "scheduler/scheduler.h"

namespace tessera::sim {

struct PlanCandidate {
  int tensor_parallel_size = 1;
  int data_parallel_size = 1;  // instances, each of tensor_parallel_size devices
  int32_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  double max_step_ms = 0;  // 0: steps bounded by tokens only
  // 0: unified instances. Else PD: this many of the data_parallel_size
  // instances prefill and the rest decode, behind the router.
  int prefill_instances = 0;
};

// What an instance of one TP degree is: its step times and KV pool.
struct TpSetup {
  std::shared_ptr<const CostModel> cost;
  int64_t num_kv_blocks = 0;
};

struct PlanScore {
  double goodput_rps = 0;  // requests/s meeting every SLO
  double attainment = 0;   // fraction of the trace's requests meeting every SLO
};

// Scores a simulated run: its requests' results in trace order and the
// virtual time the last one ended. The CLI passes tessera-bench's goodput.
using PlanScorer = std::function<PlanScore(const std::vector<TwinRequestResult>&, int64_t end_ns)>;

struct PlanInputs {
  SchedulerOptions scheduler;  // as serve builds it; the candidate's fields replace their own
  int64_t max_in_flight = 0;   // per instance, as TwinOptions
  std::map<int, TpSetup> tp;   // every TP degree the space names
  PlanScorer score;
  KvTransferModel transfer;    // PD candidates: the KV pull between instances
  int64_t prefill_threshold = 128;  // PD: shorter prompts skip the prefill pool (the router's)
};

struct PlanEval {
  PlanCandidate candidate;
  PlanScore score;
  int64_t preemptions = 0;
  int64_t end_ns = 0;
};

// One candidate on `trace`, on the cluster twin (cluster.h) behind the
// router's `round-robin` policy: dp unified instances (request i to instance
// i mod dp), or prefill and decode pools with the KV pulled on the transfer
// model. The one place a candidate is simulated.
StatusOr<PlanEval> SimulateCandidate(const PlanCandidate& candidate, const PlanInputs& inputs,
                                     const std::vector<TwinRequest>& trace);

struct PlanSpace {
  int budget = 1;                        // devices; every candidate uses all of them
  std::vector<int> tensor_parallel_sizes;  // degrees the model allows; those dividing budget are used
  std::vector<int32_t> max_num_seqs;
  std::vector<int64_t> max_num_batched_tokens;
  std::vector<double> max_step_ms;
  bool pd = false;  // also every prefill:decode split of the instances (at least 2)
};

// The grid's candidates in a fixed order (TP, then unified before each PD
// split by prefill instances, then the listed values).
std::vector<PlanCandidate> EnumerateCandidates(const PlanSpace& space);

// Every candidate simulated, best first: goodput descending, then attainment,
// then enumeration order (deterministic). INVALID_ARGUMENT for an empty grid.
StatusOr<std::vector<PlanEval>> SearchPlans(const PlanSpace& space, const PlanInputs& inputs,
                                            const std::vector<TwinRequest>& trace);

// `trace` with arrival times divided by `factor` (factor 2: twice the rate).
std::vector<TwinRequest> ScaleArrivals(const std::vector<TwinRequest>& trace, double factor);

struct CurvePoint {
  double rate_rps = 0;  // the scaled trace's mean arrival rate
  PlanScore score;
};

// The candidate at each factor of the trace's rate; INVALID_ARGUMENT when the
// trace's arrivals all fall at one instant (it has no rate to scale).
StatusOr<std::vector<CurvePoint>> GoodputCurve(const PlanCandidate& candidate, const PlanInputs& inputs,
                                               const std::vector<TwinRequest>& trace,
                                               const std::vector<double>& factors);

// The highest rate on `curve` whose attainment is >= `threshold`; 0 if none.
double MaxRateMeeting(const std::vector<CurvePoint>& curve, double threshold);

}  // namespace tessera::sim
