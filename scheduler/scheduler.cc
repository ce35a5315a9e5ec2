#include "scheduler/scheduler.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <tuple>
#include <unordered_set>

namespace tessera {

bool Scheduler::KeyLess::operator()(const Sequence* a, const Sequence* b) const {
  const int32_t pa = by_priority ? a->priority : 0;
  const int32_t pb = by_priority ? b->priority : 0;
  return std::tie(pa, a->arrival_order, a->index, a->id) < std::tie(pb, b->arrival_order, b->index, b->id);
}

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerOptions options) {
  const SchedulerOptions& o = options;
  if (o.max_num_seqs < 1) return InvalidArgument("scheduler: max_num_seqs must be at least 1");
  if (o.num_lookahead_tokens < 0) return InvalidArgument("scheduler: num_lookahead_tokens must be >= 0");
  if (o.max_num_batched_tokens < o.max_num_seqs) {
    return InvalidArgument("scheduler: max_num_batched_tokens (" + std::to_string(o.max_num_batched_tokens) +
                           ") must be at least max_num_seqs (" + std::to_string(o.max_num_seqs) +
                           ") so every running sequence can advance each step");
  }
  if (o.max_waiting_seqs < 0) return InvalidArgument("scheduler: max_waiting_seqs must be >= 0");
  if (o.limits.max_model_len < 2) return InvalidArgument("scheduler: max_model_len must be at least 2");
  if (o.kv_connectors.size() > 32) return InvalidArgument("scheduler: at most 32 KV connectors");
  for (const KvConnector* c : o.kv_connectors) {
    if (c == nullptr) return InvalidArgument("scheduler: a KV connector is null");
  }
  ASSIGN_OR_RETURN(auto kv, KvCacheManager::Create(o.kv));
  if (options.retention.max_tokens < 0) {
    options.retention.max_tokens = int64_t{kv->num_blocks()} * kv->block_size() / 2;
  }
  if (!options.clock) {
    options.clock = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now().time_since_epoch()).count();
    };
  }
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(options), std::move(kv)));
}

Scheduler::Scheduler(SchedulerOptions options, std::unique_ptr<KvCacheManager> kv)
    : options_(std::move(options)),
      kv_(std::move(kv)),
      key_less_{options_.policy == SchedulingPolicy::kPriority},
      waiting_(key_less_),
      retention_(options_.retention, kv_->block_size()) {
  kv_->mutable_pool().set_demoter(options_.retention_demoter);
  for (const KvConnector* c : options_.kv_connectors) wants_computed_blocks_ |= c->WantsComputedBlocks();
}

Sequence* Scheduler::NewSequence(std::shared_ptr<const Request> request, int32_t index, int64_t arrival_order,
                                 int64_t arrival_ns) {
  auto seq = std::make_unique<Sequence>();
  seq->id = next_seq_id_++;
  seq->index = index;
  seq->token_ids = request->prompt_token_ids;
  seq->num_prompt_tokens = static_cast<int64_t>(request->prompt_token_ids.size());
  seq->max_output_tokens = ResolveMaxTokens(seq->num_prompt_tokens, request->params, options_.limits);
  seq->priority = request->params.priority;
  seq->arrival_order = arrival_order;
  seq->arrival_time_ns = arrival_ns;
  seq->request = std::move(request);
  Sequence* raw = seq.get();
  OfferKv(raw, /*after_preemption=*/false);
  requests_[raw->request_id()].push_back(raw->id);
  seqs_.emplace(raw->id, std::move(seq));
  return raw;
}

Status Scheduler::AddRequest(Request request) {
  // The front end validated it (ValidateRequest); only what this relies on is checked.
  Status valid = CheckRequestInvariants(request, options_.limits);
  if (!valid.ok()) {
    ++counters_.requests_rejected;
    return valid;
  }
  if (requests_.count(request.id)) {
    ++counters_.requests_rejected;
    return InvalidArgument("request id '" + request.id + "' is already in use");
  }
  const int64_t prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  const int64_t max_out = ResolveMaxTokens(prompt, request.params, options_.limits);
  const int64_t need = kv_->BlocksForTokens(prompt + max_out + options_.num_lookahead_tokens);
  if (need > kv_->num_blocks()) {
    ++counters_.requests_rejected;
    return InvalidArgument("request needs " + std::to_string(need) + " KV blocks (" + std::to_string(prompt) +
                           " prompt + " + std::to_string(max_out) + " max_tokens) but the KV cache holds only " +
                           std::to_string(kv_->num_blocks()) + " blocks of " + std::to_string(kv_->block_size()) +
                           " tokens; lower 'max_tokens' or shorten the prompt");
  }
  if (static_cast<int64_t>(waiting_.size()) >= options_.max_waiting_seqs) {
    ++counters_.requests_queue_full;
    return ResourceExhausted("the server is at capacity: " + std::to_string(waiting_.size()) +
                             " requests are already waiting; retry later");
  }
  std::vector<Sequence::Hold> holds;
  if (!request.retention.prefixes.empty()) {
    StatusOr<std::vector<Sequence::Hold>> admitted = AdmitRetention(request, options_.clock());
    if (!admitted.ok()) {
      ++counters_.requests_rejected;
      return admitted.status();
    }
    holds = std::move(*admitted);
  }
  ++counters_.requests_added;
  const int64_t arrival_ns = request.arrival_time_ns != 0 ? request.arrival_time_ns : options_.clock();
  const int32_t n = request.params.n;
  Sequence* leader = NewSequence(std::make_shared<const Request>(std::move(request)), 0, next_arrival_++,
                                 arrival_ns);
  leader->pending_forks = n - 1;
  leader->retain_pending = !holds.empty();
  leader->retain = std::move(holds);
  waiting_.insert(leader);
  return Status::Ok();
}

Status Scheduler::AbortRequest(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return NotFound("no live request '" + request_id + "'");
  const std::vector<SeqId> ids = it->second;
  for (SeqId id : ids) {
    if (in_flight_) {
      deferred_.emplace_back(id, FinishReason::kAbort);
    } else {
      Finish(seqs_.at(id).get(), FinishReason::kAbort);
    }
  }
  return Status::Ok();
}

Status Scheduler::FinishSequence(const std::string& request_id, int32_t index, FinishReason reason) {
  auto it = requests_.find(request_id);
  if (it != requests_.end()) {
    for (SeqId id : it->second) {
      Sequence* seq = seqs_.at(id).get();
      if (seq->index != index) continue;
      if (in_flight_) {
        deferred_.emplace_back(id, reason);
      } else {
        Finish(seq, reason);
      }
      return Status::Ok();
    }
  }
  return NotFound("no live choice " + std::to_string(index) + " of request '" + request_id + "'");
}

Status Scheduler::SetDraftTokens(SeqId id, std::vector<int32_t> drafts) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second->status != SeqStatus::kRunning) {
    return FailedPrecondition("draft tokens for sequence " + std::to_string(id) + ", which is not running");
  }
  if (in_flight_) return FailedPrecondition("draft tokens must be set between steps");
  if (static_cast<int64_t>(drafts.size()) > options_.num_lookahead_tokens) {
    return InvalidArgument("draft tokens: " + std::to_string(drafts.size()) + " exceed num_lookahead_tokens " +
                           std::to_string(options_.num_lookahead_tokens));
  }
  it->second->draft_token_ids = std::move(drafts);
  return Status::Ok();
}

int32_t Scheduler::ReserveDraftSlots(SeqId id, int32_t num_drafts) {
  auto it = seqs_.find(id);
  if (in_flight_ || it == seqs_.end() || it->second->status != SeqStatus::kRunning) return 0;
  Sequence& s = *it->second;
  num_drafts = static_cast<int32_t>(std::min<int64_t>(num_drafts, options_.num_lookahead_tokens));
  std::vector<CopyOp> copies;  // num_new == 0: no copy-on-write
  for (int32_t n = num_drafts; n > 0; --n) {
    if (kv_->AllocateSlots(s.id, s.num_computed_tokens, 0, s.num_tokens() + n - s.num_computed_tokens, nullptr,
                           &copies)) {
      return n;
    }
  }
  return 0;
}

const Sequence* Scheduler::GetSequence(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void Scheduler::InsertRunning(Sequence* seq) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, key_less_), seq);
}

void Scheduler::EraseRunning(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  if (it != running_.end()) running_.erase(it);
}

void Scheduler::UpdateHashes(Sequence* seq) {
  if (!kv_->caching_enabled()) return;
  kv_->hash_scheme().ExtendBlockHashes(seq->token_ids, kv_->block_size(), seq->cache_keys(), seq->request->cache_salt,
                                       &seq->block_hashes);
}

void Scheduler::Preempt(Sequence* seq) {
  kv_->Free(seq->id);
  seq->num_computed_tokens = 0;
  seq->draft_token_ids.clear();
  seq->status = SeqStatus::kWaiting;
  OfferKv(seq, /*after_preemption=*/true);  // the blocks the pool drops may be in a tier
  ++seq->num_preemptions;
  ++counters_.preemptions;
  EraseRunning(seq);
  waiting_.insert(seq);
}

// Choices 1..n-1 of a request that cannot share the leader's blocks become
// ordinary waiting sequences; they still share full prompt blocks through the
// prefix cache.
std::vector<Sequence*> Scheduler::ReleaseForks(Sequence* leader) {
  std::vector<Sequence*> released;
  while (leader->pending_forks > 0) {
    const int32_t index = leader->request->params.n - leader->pending_forks--;
    Sequence* child = NewSequence(leader->request, index, leader->arrival_order, leader->arrival_time_ns);
    child->block_hashes = leader->block_hashes;
    waiting_.insert(child);
    released.push_back(child);
  }
  return released;
}

// A leader stops its prefill one token short of the prompt's end; there the
// other choices fork from it, sharing every block (the partial last one is
// copied on write), and each computes the last prompt token itself to get its
// own logits. A child joins running only where it would have been admitted
// anyway (a free seat, nothing ahead of it waiting); otherwise it waits.
void Scheduler::ResolveForks() {
  const std::vector<Sequence*> snapshot = running_;
  for (Sequence* leader : snapshot) {
    if (leader->pending_forks == 0) continue;
    const int64_t fork_at = leader->num_prompt_tokens - 1;
    if (leader->num_computed_tokens == fork_at) {
      while (leader->pending_forks > 0 && static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
        const int32_t index = leader->request->params.n - leader->pending_forks;
        Sequence probe;
        probe.priority = leader->priority;
        probe.arrival_order = leader->arrival_order;
        probe.index = index;
        probe.id = next_seq_id_;
        if (!waiting_.empty() && !key_less_(&probe, *waiting_.begin())) break;
        --leader->pending_forks;
        Sequence* child = NewSequence(leader->request, index, leader->arrival_order, leader->arrival_time_ns);
        child->block_hashes = leader->block_hashes;
        child->num_computed_tokens = fork_at;
        child->status = SeqStatus::kRunning;
        child->first_scheduled_ns = options_.clock();
        kv_->Fork(leader->id, child->id, fork_at);
        InsertRunning(child);
      }
    }
    ReleaseForks(leader);
  }
}

int64_t Scheduler::NumNewTokens(const Sequence& seq, int64_t budget) const {
  int64_t n = seq.num_tokens() + static_cast<int64_t>(seq.draft_token_ids.size()) - seq.num_computed_tokens;
  const int64_t fork_at = seq.num_prompt_tokens - 1;
  if (seq.pending_forks > 0 && seq.num_computed_tokens < fork_at) n = std::min(n, fork_at - seq.num_computed_tokens);
  return std::min(n, budget);
}

// Tokens speculative drafts may use this step: what is left of `budget` after
// one token per running sequence, and, while prefills are pending, at most
// half of it (the other half keeps chunked prefills moving).
int64_t Scheduler::DraftBudget(const std::vector<Sequence*>& running, int64_t budget) const {
  int64_t drafts = 0, prefill = 0;
  for (const Sequence* s : running) {
    drafts += static_cast<int64_t>(s->draft_token_ids.size());
    prefill += std::max<int64_t>(0, s->num_tokens() - s->num_computed_tokens - 1);
  }
  if (drafts == 0) return 0;
  for (auto it = waiting_.begin(); it != waiting_.end() && prefill < budget; ++it) prefill += (*it)->num_tokens();
  int64_t allowance = budget - static_cast<int64_t>(running.size());
  if (prefill > 0) allowance = std::min(allowance, budget / 2);
  return std::max<int64_t>(0, allowance);
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  out.step = counters_.steps;
  out.finished = std::move(finished_since_plan_);
  finished_since_plan_.clear();
  plan_.clear();
  const int64_t now_ns = options_.clock();
  kv_->mutable_pool().ExpireRetention(now_ns);
  retention_.Expire(now_ns);
  ResolveForks();

  struct Entry {
    Sequence* seq;
    int64_t num_new;
    std::vector<CopyOp> copies;
    bool live;
  };
  std::vector<Entry> entries;
  std::unordered_map<SeqId, size_t> entry_of;
  int64_t budget = options_.max_num_batched_tokens;
  bool preempted_any = false;
  const int64_t k = options_.num_lookahead_tokens;
  if (step_token_budget_ > 0) {
    int64_t decode_tokens = 0;
    for (const Sequence* s : running_) {
      if (s->num_tokens() - s->num_computed_tokens <= 1) decode_tokens += 1 + k;
    }
    budget = std::min(budget, std::max(step_token_budget_, decode_tokens + kMinStepPrefillTokens));
  }
  // Prompt-logprob rows left this step (SetStepPromptLogprobRows).
  int64_t rows_left = step_prompt_logprob_rows_ > 0 ? std::max(step_prompt_logprob_rows_, kMinStepPrefillTokens)
                                                    : INT64_MAX;
  auto cap_rows = [&](const Sequence& s, int64_t num_new) {
    if (!s.params().prompt_logprobs || s.num_computed_tokens >= s.num_prompt_tokens) return num_new;
    const int64_t n = std::min(num_new, rows_left);
    rows_left -= n;
    return n;
  };
  auto lookahead = [&](const Sequence& s, int64_t num_new) {
    // Room for k speculative tokens past the real ones (drafts scheduled now count).
    const int64_t drafts = std::max<int64_t>(0, s.num_computed_tokens + num_new - s.num_tokens());
    return std::max<int64_t>(0, k - drafts);
  };

  // 1. Running: decodes first, then unfinished prefills, each in policy order.
  std::vector<Sequence*> order = running_;
  std::stable_partition(order.begin(), order.end(),
                        [](const Sequence* s) { return s->num_tokens() - s->num_computed_tokens <= 1; });
  int64_t draft_budget = DraftBudget(order, budget);
  for (Sequence* seq : order) {
    if (budget <= 0) break;
    if (seq->status != SeqStatus::kRunning) continue;  // preempted earlier this step
    const int64_t drafts = static_cast<int64_t>(seq->draft_token_ids.size());
    const int64_t kept = std::min(drafts, draft_budget);  // drafts past the allowance wait for a later step
    const int64_t num_new = cap_rows(*seq, std::min(NumNewTokens(*seq, INT64_MAX) - (drafts - kept), budget));
    draft_budget -= kept;
    if (num_new <= 0) continue;
    std::vector<CopyOp> copies;
    bool ok = false;
    while (!ok) {
      ok = kv_->AllocateSlots(seq->id, seq->num_computed_tokens, num_new, lookahead(*seq, num_new), nullptr,
                              &copies);
      if (ok) break;
      // Out of blocks: preempt the lowest-priority, latest arrival (maybe seq).
      Sequence* victim = running_.back();
      if (auto e = entry_of.find(victim->id); e != entry_of.end()) {
        entries[e->second].live = false;
        budget += entries[e->second].num_new;
        entry_of.erase(e);
      }
      Preempt(victim);
      out.preempted.push_back(victim->id);
      preempted_any = true;
      if (victim == seq) break;
    }
    if (!ok) continue;
    entry_of[seq->id] = entries.size();
    entries.push_back({seq, num_new, std::move(copies), true});
    budget -= num_new;
  }

  // 2. Waiting, in policy order, while seats, budget and blocks last. Not
  // after a preemption: memory is short, and the victim must not bounce.
  while (!preempted_any && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
    auto next = waiting_.begin();
    // Its KV is on the way from a tier or a peer.
    while (next != waiting_.end() && (*next)->kv_load != 0) ++next;
    if (next == waiting_.end()) break;
    Sequence* seq = *next;
    UpdateHashes(seq);
    PrefixHit hit;
    if (!seq->params().prompt_logprobs) hit = kv_->FindCachedPrefix(seq->block_hashes, seq->num_tokens());
    seq->num_computed_tokens = hit.num_tokens;
    const int64_t num_new = cap_rows(*seq, NumNewTokens(*seq, budget));
    std::vector<CopyOp> copies;
    if (num_new <= 0 ||
        !kv_->AllocateSlots(seq->id, hit.num_tokens, num_new, lookahead(*seq, num_new), &hit, &copies)) {
      seq->num_computed_tokens = 0;
      break;
    }
    waiting_.erase(next);
    seq->status = SeqStatus::kRunning;
    InsertRunning(seq);
    if (seq->retain_pending) ApplyRetention(seq);  // a hit on a retained prefix refreshes its hold
    if (seq->first_scheduled_ns < 0) {
      seq->first_scheduled_ns = options_.clock();
      seq->num_cached_tokens = hit.num_tokens;
      seq->cache_waterfall = AccountPrompt(*seq, hit.num_tokens);
      seq->loaded_from = {};
    }
    entry_of[seq->id] = entries.size();
    entries.push_back({seq, num_new, std::move(copies), true});
    budget -= num_new;
  }

  // 3. Emit the plan and advance computed counts.
  for (Entry& e : entries) {
    if (!e.live) continue;
    Sequence* s = e.seq;
    ScheduledSequence ss;
    ss.seq_id = s->id;
    ss.request_id = s->request_id();
    ss.index = s->index;
    ss.start_position = s->num_computed_tokens;
    const int64_t end = s->num_computed_tokens + e.num_new;
    ss.token_ids.reserve(e.num_new);
    for (int64_t p = s->num_computed_tokens; p < end; ++p) {
      ss.token_ids.push_back(p < s->num_tokens() ? s->token_ids[p] : s->draft_token_ids[p - s->num_tokens()]);
    }
    ss.num_draft_tokens = static_cast<int32_t>(std::max<int64_t>(0, end - s->num_tokens()));
    ss.sample = end >= s->num_tokens();
    ss.num_logits = ss.sample ? 1 + ss.num_draft_tokens : 0;
    if (s->params().prompt_logprobs && s->num_computed_tokens < s->num_prompt_tokens) {
      ss.num_logits = static_cast<int32_t>(e.num_new);
    }
    const auto blocks = kv_->blocks(s->id);
    ss.block_ids.assign(blocks.begin(), blocks.end());
    counters_.prompt_tokens += std::max<int64_t>(0, std::min(end, s->num_prompt_tokens) - s->num_computed_tokens);
    s->num_computed_tokens = end;
    out.copies.insert(out.copies.end(), e.copies.begin(), e.copies.end());
    out.num_scheduled_tokens += e.num_new;
    plan_.push_back({s->id, ss.num_draft_tokens, ss.sample});
    out.seqs.push_back(std::move(ss));
  }
  ++counters_.steps;
  in_flight_ = !out.seqs.empty();
  return out;
}

FinishReason Scheduler::CheckStop(const Sequence& seq, int32_t token) const {
  const SamplingParams& p = seq.params();
  if (seq.num_output_tokens() >= p.min_tokens) {
    const auto& eos = options_.eos_token_ids;
    if (!p.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) return FinishReason::kStop;
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
      return FinishReason::kStop;
    }
  }
  if (seq.num_output_tokens() >= seq.max_output_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

StatusOr<std::vector<SequenceOutput>> Scheduler::UpdateFromOutput(std::span<const SampledTokens> sampled) {
  // Validate against the plan before changing anything.
  std::unordered_map<SeqId, const SampledTokens*> by_seq;
  for (const SampledTokens& s : sampled) {
    if (!by_seq.emplace(s.seq_id, &s).second) {
      return FailedPrecondition("step output: sequence " + std::to_string(s.seq_id) + " appears twice");
    }
  }
  size_t expected = 0;
  for (const PlanEntry& e : plan_) {
    if (!e.sample) continue;
    ++expected;
    auto it = by_seq.find(e.seq);
    if (it == by_seq.end()) {
      return FailedPrecondition("step output: no tokens for sequence " + std::to_string(e.seq));
    }
    const size_t n = it->second->token_ids.size();
    if (n < 1 || n > static_cast<size_t>(1 + e.num_drafts)) {
      return FailedPrecondition("step output: sequence " + std::to_string(e.seq) + " got " + std::to_string(n) +
                                " tokens, expected 1.." + std::to_string(1 + e.num_drafts));
    }
  }
  if (expected != by_seq.size()) return FailedPrecondition("step output: tokens for unscheduled sequences");

  std::vector<SequenceOutput> outputs;
  for (const PlanEntry& e : plan_) {
    Sequence* s = seqs_.at(e.seq).get();
    FinishReason reason = FinishReason::kNone;
    if (e.sample) {
      const std::vector<int32_t>& toks = by_seq.at(e.seq)->token_ids;
      // Drafts beyond the accepted ones were computed into slots that the
      // next step overwrites.
      s->num_computed_tokens -= e.num_drafts - static_cast<int64_t>(toks.size() - 1);
      s->draft_token_ids.clear();
      SequenceOutput o{s->id, s->request_id(), s->index, {}, FinishReason::kNone, s->num_cached_tokens,
                       s->cache_waterfall};
      for (int32_t t : toks) {
        s->token_ids.push_back(t);
        o.new_token_ids.push_back(t);
        ++counters_.generation_tokens;
        reason = CheckStop(*s, t);
        if (reason != FinishReason::kNone) break;
      }
      o.finish_reason = reason;
      outputs.push_back(std::move(o));
    }
    UpdateHashes(s);
    std::vector<std::pair<BlockId, BlockHash>> fresh;
    kv_->CacheComputedBlocks(s->id, s->block_hashes, std::min(s->num_computed_tokens, s->num_tokens()), s->token_ids,
                             wants_computed_blocks_ ? &fresh : nullptr);
    if (s->retain_pending) ApplyRetention(s);  // before the connectors see them: a tier pins held blocks
    if (!fresh.empty()) {
      for (KvConnector* c : options_.kv_connectors) {
        if (c->WantsComputedBlocks()) c->OnBlocksComputed(*s->request, fresh);
      }
    }
    if (reason != FinishReason::kNone) Finish(s, reason);
  }
  plan_.clear();
  in_flight_ = false;
  for (const auto& [id, reason] : deferred_) {
    auto it = seqs_.find(id);
    if (it != seqs_.end()) Finish(it->second.get(), reason);
  }
  deferred_.clear();
  return outputs;
}

void Scheduler::Finish(Sequence* seq, FinishReason reason) {
  // Unforked choices end with an aborted leader, else carry on without it.
  for (Sequence* child : ReleaseForks(seq)) {
    if (reason == FinishReason::kAbort) Finish(child, reason);
  }
  if (seq->kv_load != 0) {
    // A load still writes into its blocks: FinishKvLoad frees them when it ends.
  } else if (reason == FinishReason::kAbort || !HoldKv(seq)) {
    kv_->Free(seq->id);
  }
  if (seq->status == SeqStatus::kRunning) {
    EraseRunning(seq);
  } else if (seq->status == SeqStatus::kWaiting) {
    waiting_.erase(seq);
  }
  seq->status = SeqStatus::kFinished;
  seq->finish_reason = reason;
  switch (reason) {
    case FinishReason::kStop: ++counters_.seqs_finished_stop; break;
    case FinishReason::kLength: ++counters_.seqs_finished_length; break;
    default: ++counters_.seqs_aborted; break;
  }
  FinishedSequenceStats st;
  st.request_id = seq->request_id();
  st.index = seq->index;
  st.reason = reason;
  st.queue_time_s = seq->first_scheduled_ns < 0 ? 0.0 : (seq->first_scheduled_ns - seq->arrival_time_ns) * 1e-9;
  st.num_prompt_tokens = seq->num_prompt_tokens;
  st.num_output_tokens = seq->num_output_tokens();
  st.num_cached_tokens = seq->num_cached_tokens;
  st.num_preemptions = seq->num_preemptions;
  finished_stats_.push_back(std::move(st));
  finished_since_plan_.push_back(seq->id);
  DropKvOffers(seq);

  auto group = requests_.find(seq->request_id());
  auto& ids = group->second;
  ids.erase(std::find(ids.begin(), ids.end(), seq->id));
  if (ids.empty()) requests_.erase(group);
  seqs_.erase(seq->id);  // destroys seq
}

SchedulerMetrics Scheduler::metrics() const {
  SchedulerMetrics m;
  m.counters = counters_;
  const KvCacheStats kv = kv_->stats();
  m.counters.prefix_cache_queries = kv.prefix_queries;
  m.counters.prefix_cache_hits = kv.prefix_hits;
  m.counters.cow_copies = kv.cow_copies;
  m.counters.evictions = kv.evictions;
  m.gauges.num_running = num_running();
  m.gauges.num_waiting = num_waiting();
  m.gauges.kv_usage = kv_->Usage();
  m.gauges.num_exported = num_kv_holds();
  m.gauges.retained_blocks = kv_->pool().num_retained_blocks();
  for (const KvConnector* c : options_.kv_connectors) c->AddCounters(&m.counters);
  return m;
}

std::vector<FinishedSequenceStats> Scheduler::TakeFinishedStats() {
  std::vector<FinishedSequenceStats> out;
  out.swap(finished_stats_);
  return out;
}

}  // namespace tessera
