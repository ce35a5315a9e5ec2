#include "runtime/sim/twin.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "scheduler/step_budget.h"

namespace tessera::sim {
namespace {

// The token the twin "samples": any id does (requests run with ignore_eos and
// no stop tokens); a per-sequence hash keeps different sequences' generated
// blocks distinct in the prefix cache, as sampled text would be.
int32_t FakeToken(SeqId seq, int64_t position, int64_t vocab) {
  uint64_t x = static_cast<uint64_t>(seq) * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(position);
  x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  return static_cast<int32_t>(x % static_cast<uint64_t>(vocab > 0 ? vocab : 32000));
}

Status CheckOptions(const TwinOptions& o, const std::vector<TwinRequest>& requests) {
  if (o.cost == nullptr) return InvalidArgument("twin: no cost model");
  if (!o.scheduler.kv_connectors.empty()) {
    return InvalidArgument("twin: KV connectors (PD transfer, KV tiers) are not modelled");
  }
  if (o.scheduler.num_lookahead_tokens != 0) return InvalidArgument("twin: speculative decoding is not modelled");
  for (size_t i = 1; i < requests.size(); ++i) {
    if (requests[i].arrival_ns < requests[i - 1].arrival_ns) {
      return InvalidArgument("twin: request '" + requests[i].id + "' arrives before the one listed ahead of it");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<TwinResult> RunTwin(TwinOptions options, const std::vector<TwinRequest>& requests) {
  RETURN_IF_ERROR(CheckOptions(options, requests));
  VirtualClock clock;
  options.scheduler.clock = [&clock] { return clock.now_ns(); };
  const ModelLimits limits = options.scheduler.limits;
  ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler, Scheduler::Create(options.scheduler));
  StepBudget budget(options.max_step_ms);
  budget.Init(scheduler.get());

  TwinResult result;
  result.requests.resize(requests.size());
  std::unordered_map<std::string, size_t> index_of;
  size_t next = 0;
  double kv_usage_sum = 0;
  std::vector<SampledTokens> sampled;
  while (next < requests.size() || scheduler->HasUnfinished()) {
    if (!scheduler->HasUnfinished()) clock.AdvanceTo(requests[next].arrival_ns);
    // Arrivals by now, as the engine loop drains its inbox before a step.
    for (; next < requests.size() && requests[next].arrival_ns <= clock.now_ns(); ++next) {
      const TwinRequest& t = requests[next];
      TwinRequestResult& r = result.requests[next];
      r.id = t.id;
      r.arrival_ns = t.arrival_ns;
      r.prompt_tokens = static_cast<int64_t>(t.prompt_token_ids.size());
      Request req;
      req.id = t.id;
      req.prompt_token_ids = t.prompt_token_ids;
      req.params.max_tokens = static_cast<int32_t>(std::clamp<int64_t>(t.max_tokens, 1, INT32_MAX));
      req.params.ignore_eos = true;
      req.arrival_time_ns = t.arrival_ns;
      Status s = ValidateRequest(req, limits);
      if (s.ok() && options.max_in_flight > 0 &&
          scheduler->num_running() + scheduler->num_waiting() >= options.max_in_flight) {
        s = ResourceExhausted("too many requests in flight (429)");
      }
      if (s.ok() && !index_of.emplace(t.id, next).second) s = InvalidArgument("request id '" + t.id + "' repeats");
      if (s.ok()) s = scheduler->AddRequest(std::move(req));
      if (!s.ok()) {
        r.error = s.ToString();
        index_of.erase(t.id);
      }
    }
    if (!scheduler->HasUnfinished()) continue;
    const SchedulerOutput plan = scheduler->Schedule();
    if (plan.empty()) {
      return Internal("twin: the scheduler planned nothing with " + std::to_string(scheduler->num_waiting()) +
                      " sequences waiting");
    }
    StepShape shape = ShapeOf(plan, *scheduler);
    shape.ordinal = result.stats.steps;
    const int64_t step_ns = options.cost->StepNs(shape);
    if (options.on_step) options.on_step(plan, shape, step_ns, *scheduler);
    clock.Advance(step_ns);
    sampled.clear();
    for (const ScheduledSequence& s : plan.seqs) {
      if (!s.sample) continue;
      const int64_t position = s.start_position + static_cast<int64_t>(s.token_ids.size());
      sampled.push_back({s.seq_id, {FakeToken(s.seq_id, position, limits.vocab_size)}});
    }
    ASSIGN_OR_RETURN(std::vector<SequenceOutput> outputs, scheduler->UpdateFromOutput(sampled));
    budget.Update(plan, step_ns, 0, 0, scheduler.get());
    ++result.stats.steps;
    for (const SequenceOutput& o : outputs) {
      auto it = index_of.find(o.request_id);
      if (it == index_of.end()) continue;
      TwinRequestResult& r = result.requests[it->second];
      if (r.token_ns.empty()) r.cached_tokens = o.num_cached_tokens;
      r.token_ns.insert(r.token_ns.end(), o.new_token_ids.size(), clock.now_ns());
    }
    for (const FinishedSequenceStats& st : scheduler->TakeFinishedStats()) {
      auto it = index_of.find(st.request_id);
      if (it == index_of.end()) continue;
      TwinRequestResult& r = result.requests[it->second];
      r.ok = st.reason == FinishReason::kLength || st.reason == FinishReason::kStop;
      if (!r.ok) r.error = std::string("ended with finish_reason ") + FinishReasonName(st.reason);
      r.preemptions = st.num_preemptions;
      result.stats.end_ns = clock.now_ns();
    }
    const double usage = scheduler->kv_cache().Usage();
    kv_usage_sum += usage;
    result.stats.kv_usage_max = std::max(result.stats.kv_usage_max, usage);
  }
  if (result.stats.steps > 0) result.stats.kv_usage_mean = kv_usage_sum / static_cast<double>(result.stats.steps);
  result.stats.counters = scheduler->metrics().counters;
  return result;
}

}  // namespace tessera::sim
