#include "runtime/sim/plan.h"

#include <algorithm>
#include <cmath>

namespace tessera::sim {

StatusOr<PlanEval> SimulateCandidate(const PlanCandidate& c, const PlanInputs& in,
                                     const std::vector<TwinRequest>& trace) {
  auto setup = in.tp.find(c.tensor_parallel_size);
  if (setup == in.tp.end() || !setup->second.cost) {
    return InvalidArgument("plan: no cost model for tensor parallel size " + std::to_string(c.tensor_parallel_size));
  }
  if (c.data_parallel_size < 1 || c.max_num_seqs < 1 || c.max_num_batched_tokens < 1) {
    return InvalidArgument("plan: a candidate needs dp, max-num-seqs and max-num-batched-tokens >= 1");
  }
  if (setup->second.num_kv_blocks <= 0) {
    return InvalidArgument("plan: tensor parallel size " + std::to_string(c.tensor_parallel_size) +
                           " leaves no memory for the KV cache");
  }
  TwinOptions to;
  to.scheduler = in.scheduler;
  to.scheduler.max_num_seqs = c.max_num_seqs;
  to.scheduler.max_num_batched_tokens = c.max_num_batched_tokens;
  to.scheduler.kv.num_blocks = static_cast<int32_t>(setup->second.num_kv_blocks);
  to.max_step_ms = c.max_step_ms;
  to.max_in_flight = in.max_in_flight;
  to.cost = setup->second.cost.get();
  // The instances behind the router's `round-robin` policy (request i to
  // instance i mod dp), what a Kubernetes Service in front of the deployed
  // replicas approximates; on the cluster twin's one virtual clock.
  ClusterOptions co;
  co.routing_logic = RoutingLogic::kRoundRobin;
  if (c.prefill_instances > 0) {
    if (c.prefill_instances >= c.data_parallel_size) {
      return InvalidArgument("plan: a PD candidate needs at least one decode instance");
    }
    co.layout = ClusterLayout::kPd;
    co.prefill_instances = c.prefill_instances;
    co.decode_instances = c.data_parallel_size - c.prefill_instances;
    co.prefill = to;
    co.decode = to;
    co.transfer = in.transfer;
    co.prefill_threshold = in.prefill_threshold;
  } else {
    co.layout = ClusterLayout::kUnified;
    co.instances = c.data_parallel_size;
    co.unified = to;
  }
  ASSIGN_OR_RETURN(ClusterResult run, RunCluster(co, trace));
  PlanEval eval;
  eval.candidate = c;
  eval.preemptions = run.stats.preemptions;
  eval.end_ns = run.stats.end_ns;
  eval.score = in.score(run.requests, eval.end_ns);
  return eval;
}

std::vector<PlanCandidate> EnumerateCandidates(const PlanSpace& s) {
  std::vector<PlanCandidate> out;
  for (int tp : s.tensor_parallel_sizes) {
    if (tp < 1 || s.budget % tp != 0) continue;
    const int instances = s.budget / tp;
    const int max_prefill = s.pd ? instances - 1 : 0;
    for (int prefill = 0; prefill <= max_prefill; ++prefill) {
      for (int32_t seqs : s.max_num_seqs) {
        for (int64_t tokens : s.max_num_batched_tokens) {
          for (double step_ms : s.max_step_ms) out.push_back({tp, instances, seqs, tokens, step_ms, prefill});
        }
      }
    }
  }
  return out;
}

StatusOr<std::vector<PlanEval>> SearchPlans(const PlanSpace& space, const PlanInputs& inputs,
                                            const std::vector<TwinRequest>& trace) {
  const std::vector<PlanCandidate> candidates = EnumerateCandidates(space);
  if (candidates.empty()) {
    return InvalidArgument("plan: no candidate: no TP degree the model allows divides the budget of " +
                           std::to_string(space.budget) + ", or a grid is empty");
  }
  std::vector<PlanEval> evals;
  for (const PlanCandidate& c : candidates) {
    ASSIGN_OR_RETURN(PlanEval e, SimulateCandidate(c, inputs, trace));
    evals.push_back(e);
  }
  std::stable_sort(evals.begin(), evals.end(), [](const PlanEval& a, const PlanEval& b) {
    if (a.score.goodput_rps != b.score.goodput_rps) return a.score.goodput_rps > b.score.goodput_rps;
    return a.score.attainment > b.score.attainment;
  });
  return evals;
}

std::vector<TwinRequest> ScaleArrivals(const std::vector<TwinRequest>& trace, double factor) {
  std::vector<TwinRequest> out = trace;
  for (TwinRequest& r : out) r.arrival_ns = static_cast<int64_t>(std::llround(static_cast<double>(r.arrival_ns) / factor));
  return out;
}

StatusOr<std::vector<CurvePoint>> GoodputCurve(const PlanCandidate& c, const PlanInputs& inputs,
                                               const std::vector<TwinRequest>& trace,
                                               const std::vector<double>& factors) {
  const int64_t span_ns = trace.empty() ? 0 : trace.back().arrival_ns - trace.front().arrival_ns;
  if (span_ns <= 0 || trace.size() < 2) {
    return InvalidArgument("plan: the trace's arrivals fall at one instant, so it has no rate to scale "
                           "(give a finite --request-rate or a timed trace)");
  }
  const double base_rps = static_cast<double>(trace.size() - 1) / (static_cast<double>(span_ns) / 1e9);
  std::vector<CurvePoint> curve;
  for (double f : factors) {
    if (!(f > 0)) return InvalidArgument("plan: rate factors must be > 0");
    ASSIGN_OR_RETURN(PlanEval e, SimulateCandidate(c, inputs, ScaleArrivals(trace, f)));
    curve.push_back({base_rps * f, e.score});
  }
  return curve;
}

double MaxRateMeeting(const std::vector<CurvePoint>& curve, double threshold) {
  double best = 0;
  for (const CurvePoint& p : curve) {
    if (p.score.attainment >= threshold) best = std::max(best, p.rate_rps);
  }
  return best;
}

}  // namespace tessera::sim
