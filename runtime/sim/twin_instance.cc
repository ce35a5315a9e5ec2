#include "runtime/sim/twin_instance.h"

#include <algorithm>
#include <utility>

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

}  // namespace

StatusOr<std::unique_ptr<TwinInstance>> TwinInstance::Create(TwinOptions options, KvConnector* connector,
                                                             TwinKvWorker* worker) {
  if (options.cost == nullptr) return InvalidArgument("twin: no cost model");
  if (!options.scheduler.kv_connectors.empty()) {
    return InvalidArgument("twin: KV connectors (PD transfer, KV tiers) are not modelled");
  }
  if (options.scheduler.num_lookahead_tokens != 0) return InvalidArgument("twin: speculative decoding is not modelled");
  if ((connector == nullptr) != (worker == nullptr)) return InvalidArgument("twin: a KV connector needs its worker");
  auto t = std::unique_ptr<TwinInstance>(new TwinInstance());
  TwinInstance* self = t.get();
  options.scheduler.clock = [self] { return self->now_ns_; };
  if (connector != nullptr) options.scheduler.kv_connectors = {connector};
  ASSIGN_OR_RETURN(t->scheduler_, Scheduler::Create(options.scheduler));
  t->budget_ = std::make_unique<StepBudget>(options.max_step_ms);
  t->budget_->Init(t->scheduler_.get());
  t->worker_ = worker;
  t->options_ = std::move(options);
  return t;
}

void TwinInstance::Submit(TwinSubmission submission) { inbox_.push_back(std::move(submission)); }

bool TwinInstance::AwaitsKvEvent() const {
  return worker_ != nullptr &&
         (worker_->LoadsInFlight() || worker_->NextDoneNs() != kNever || scheduler_->num_kv_holds() > 0);
}

bool TwinInstance::Runnable() const {
  if (!scheduler_->HasUnfinished() || scheduler_->WaitingOnLoadsOnly()) return false;
  // After a step that planned nothing while a load or a release is owed, only an event changes that.
  return !(last_plan_empty_ && AwaitsKvEvent());
}

int64_t TwinInstance::NextEventNs() const {
  if (in_flight_) return now_ns_ + step_ns_;
  int64_t t = Runnable() ? now_ns_ : kNever;
  if (!inbox_.empty()) t = std::min(t, std::max(now_ns_, inbox_.front().at_ns));
  if (worker_ != nullptr) {
    const int64_t d = worker_->NextDoneNs();
    if (d != kNever) t = std::min(t, std::max(now_ns_, d));
  }
  return t;
}

Status TwinInstance::Advance() {
  if (in_flight_) return End();
  const int64_t t = NextEventNs();
  if (t == kNever) return Internal("twin: an instance with nothing to do was stepped");
  now_ns_ = t;
  return Begin();
}

// Requests that reached the instance by now, as the engine loop drains its inbox before a step.
void TwinInstance::Drain() {
  const ModelLimits& limits = options_.scheduler.limits;
  while (!inbox_.empty() && inbox_.front().at_ns <= now_ns_) {
    TwinSubmission sub = std::move(inbox_.front());
    inbox_.pop_front();
    const TwinRequest& t = sub.request;
    TwinRequestResult& r = *sub.result;
    r.id = t.id;
    r.arrival_ns = t.arrival_ns;
    r.prompt_tokens = static_cast<int64_t>(t.prompt_token_ids.size());
    Request req;
    req.id = t.id;
    req.prompt_token_ids = t.prompt_token_ids;
    req.params.max_tokens = static_cast<int32_t>(std::clamp<int64_t>(t.max_tokens, 1, INT32_MAX));
    req.params.ignore_eos = true;
    req.arrival_time_ns = sub.at_ns;
    req.export_kv = sub.export_kv;
    req.remote_kv = std::move(sub.remote_kv);
    Status s = ValidateRequest(req, limits);
    if (s.ok() && options_.max_in_flight > 0 && unfinished() >= options_.max_in_flight) {
      s = ResourceExhausted("too many requests in flight (429)");
    }
    if (s.ok() && !active_.emplace(t.id, &r).second) s = InvalidArgument("request id '" + t.id + "' repeats");
    if (s.ok()) {
      s = scheduler_->AddRequest(std::move(req));
      if (!s.ok()) active_.erase(t.id);
    }
    if (!s.ok()) {
      r.error = s.ToString();
      ended_.push_back(t.id);
    }
  }
}

Status TwinInstance::Begin() {
  Drain();
  if (worker_ != nullptr) worker_->BeforeStep(*scheduler_, now_ns_);
  if (!scheduler_->HasUnfinished()) return Status::Ok();
  plan_ = scheduler_->Schedule();
  last_plan_empty_ = plan_.empty();
  if (plan_.empty()) {
    // Waits for a load, or (prefill) for a decode to release held blocks.
    if (AwaitsKvEvent()) return Status::Ok();
    return Internal("twin: the scheduler planned nothing with " + std::to_string(scheduler_->num_waiting()) +
                    " sequences waiting");
  }
  StepShape shape = ShapeOf(plan_, *scheduler_);
  shape.ordinal = steps_;
  step_ns_ = options_.cost->StepNs(shape);
  if (options_.on_step) options_.on_step(plan_, shape, step_ns_, *scheduler_);
  in_flight_ = true;
  return Status::Ok();
}

Status TwinInstance::End() {
  now_ns_ += step_ns_;
  in_flight_ = false;
  const int64_t vocab = options_.scheduler.limits.vocab_size;
  std::vector<SampledTokens> sampled;
  for (const ScheduledSequence& s : plan_.seqs) {
    if (!s.sample) continue;
    const int64_t position = s.start_position + static_cast<int64_t>(s.token_ids.size());
    sampled.push_back({s.seq_id, {FakeToken(s.seq_id, position, vocab)}});
  }
  ASSIGN_OR_RETURN(std::vector<SequenceOutput> outputs, scheduler_->UpdateFromOutput(sampled));
  budget_->Update(plan_, step_ns_, 0, 0, scheduler_.get());
  ++steps_;
  for (const SequenceOutput& o : outputs) {
    auto it = active_.find(o.request_id);
    if (it == active_.end()) continue;
    TwinRequestResult& r = *it->second;
    if (r.token_ns.empty()) r.cached_tokens = o.num_cached_tokens;
    r.token_ns.insert(r.token_ns.end(), o.new_token_ids.size(), now_ns_);
  }
  for (const FinishedSequenceStats& st : scheduler_->TakeFinishedStats()) {
    auto it = active_.find(st.request_id);
    if (it == active_.end()) continue;
    TwinRequestResult& r = *it->second;
    r.ok = st.reason == FinishReason::kLength || st.reason == FinishReason::kStop;
    if (!r.ok) r.error = std::string("ended with finish_reason ") + FinishReasonName(st.reason);
    r.preemptions = st.num_preemptions;
    end_ns_ = now_ns_;
    ended_.push_back(st.request_id);
    active_.erase(it);
  }
  const double usage = scheduler_->kv_cache().Usage();
  kv_usage_sum_ += usage;
  kv_usage_max_ = std::max(kv_usage_max_, usage);
  return Status::Ok();
}

std::vector<std::string> TwinInstance::TakeEnded() {
  std::vector<std::string> out;
  std::swap(out, ended_);
  return out;
}

TwinStats TwinInstance::stats() const {
  TwinStats s;
  s.steps = steps_;
  s.end_ns = end_ns_;
  s.kv_usage_max = kv_usage_max_;
  if (steps_ > 0) s.kv_usage_mean = kv_usage_sum_ / static_cast<double>(steps_);
  s.counters = scheduler_->metrics().counters;
  return s;
}

}  // namespace tessera::sim
