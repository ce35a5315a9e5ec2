#include "runtime/engine_loop.h"
#include "common/log.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <unordered_set>
#include <utility>


#include "engine/kv_transfer/kv_layout.h"
#include "runtime/backend_registry.h"
#include "runtime/plan_to_batch.h"
#include "runtime/scheduler_limits.h"

namespace tessera {

// ---------------------------------------------------------------- RequestStream

RequestStream::RequestStream(std::string request_id, int32_t num_choices, std::function<void()> notify)
    : request_id_(std::move(request_id)), notify_(std::move(notify)), ended_(static_cast<size_t>(num_choices), false), remaining_(num_choices) {}

bool RequestStream::Next(RequestOutput* out) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || remaining_ == 0; });
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

bool RequestStream::TryNext(RequestOutput* out) {
  std::lock_guard lock(mu_);
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

bool RequestStream::finished() const {
  std::lock_guard lock(mu_);
  return remaining_ == 0;
}

void RequestStream::Push(RequestOutput out) {
  {
    std::lock_guard lock(mu_);
    if (out.index < 0 || out.index >= static_cast<int32_t>(ended_.size()) || ended_[out.index]) return;
    if (out.finish_reason != FinishReason::kNone) {
      ended_[out.index] = true;
      --remaining_;
    }
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
  if (notify_) notify_();
}

void RequestStream::Fail(const Status& status) {
  {
    std::lock_guard lock(mu_);
    if (remaining_ == 0) return;
    RequestOutput out;
    out.status = status;
    out.finish_reason = FinishReason::kAbort;
    for (size_t i = 0; i < ended_.size(); ++i) {
      if (ended_[i]) continue;
      ended_[i] = true;
      out.index = static_cast<int32_t>(i);
      queue_.push_back(out);
    }
    remaining_ = 0;
  }
  cv_.notify_all();
  if (notify_) notify_();
}

// ---------------------------------------------------------------- EngineLoop

namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

SamplerConfig ToSamplerConfig(const SamplingParams& p, uint64_t seed) {
  SamplerConfig c;
  c.temperature = p.temperature;
  c.top_k = p.top_k;
  c.top_p = p.top_p;
  c.min_p = p.min_p;
  c.presence_penalty = p.presence_penalty;
  c.frequency_penalty = p.frequency_penalty;
  c.repetition_penalty = p.repetition_penalty;
  c.logit_bias.assign(p.logit_bias.begin(), p.logit_bias.end());
  c.seed = seed;
  c.logprobs = p.logprobs;
  c.top_logprobs = p.top_logprobs;
  return c;
}

}  // namespace

namespace {

// KV blocks from device memory: total * utilization, minus what is in use after
// a profiled forward at the largest step (weights, activations, workspaces).
StatusOr<int32_t> BlocksFromDeviceMemory(Model* model, Backend* backend, const SchedulerOptions& so,
                                         double utilization, int64_t per_token) {
  int64_t total = 0, free_before = 0, free_after = 0;
  if (!backend->MemoryInfo(&total, &free_before)) return Internal("device memory: cannot query it");
  RETURN_IF_ERROR(model->ProfileForward(so.max_num_batched_tokens, so.max_num_seqs, so.limits.max_model_len,
                                        so.kv.block_size));
  if (!backend->MemoryInfo(&total, &free_after)) return Internal("device memory: cannot query it");
  const int64_t budget = static_cast<int64_t>(static_cast<double>(total) * utilization);
  const int64_t in_use = total - free_after;
  const int64_t kv = budget - in_use;
  constexpr double kMiB = 1048576.0;
  LogInfo("gpu memory: {:.0f} MiB x {:.2f} = {:.0f} MiB budget - {:.0f} MiB in use (weights {:.0f}, "
          "activation peak at {} tokens {:.0f}, other {:.0f}) = {:.0f} MiB for the KV pool",
          total / kMiB, utilization, budget / kMiB, in_use / kMiB, model->weight_bytes() / kMiB,
          so.max_num_batched_tokens, (free_before - free_after) / kMiB,
          (in_use - model->weight_bytes() - (free_before - free_after)) / kMiB, kv / kMiB);
  if (kv < per_token * so.kv.block_size) {
    return ResourceExhausted("gpu memory: no room for the KV pool (" + std::to_string(kv / (1 << 20)) +
                             " MiB left of the budget); raise --gpu-memory-utilization or lower "
                             "--max-num-batched-tokens");
  }
  return NumBlocksForBudget(kv, per_token, so.kv.block_size);
}

}  // namespace

StatusOr<std::unique_ptr<EngineLoop>> EngineLoop::Create(EngineLoopOptions options) {
  auto loop = std::unique_ptr<EngineLoop>(new EngineLoop());
  if (options.parallel.parallel()) {
    options.num_threads = parallel::ThreadsPerRank(options.parallel, options.num_threads);
  }
  ASSIGN_OR_RETURN(loop->backend_, MakeBackend(options.device, options.num_threads, options.cuda));
  if (options.parallel.parallel()) {
    if (options.device != "cpu") {
      return Unimplemented("--tensor-parallel-size / --data-parallel-size > 1 run on --device cpu (in-process or "
                           "Gloo ranks); GPU ranks over NCCL are not wired into serving yet");
    }
    ASSIGN_OR_RETURN(loop->group_,
                     parallel::RankGroup::Create(options.parallel, options.model_dir, options.num_threads));
    auto model = Model::Load(options.model_dir, loop->backend_.get(), &loop->group_->leader_setup());
    if (!model.ok()) {
      (void)loop->group_->Start(model.status(), 0, 0, 0);  // releases the workers
      return model.status();
    }
    loop->model_ = std::move(*model);
  } else {
    ASSIGN_OR_RETURN(loop->model_, Model::Load(options.model_dir, loop->backend_.get()));
  }
  const ModelConfig& mc = loop->model_->config();

  SchedulerOptions& so = options.scheduler;
  const bool auto_len = ApplyModelLimits(mc, &so);
  // engine/kv_layout.h: K and V rows, or one MLA latent row per layer.
  const int64_t per_token = mc.KvBytesPerToken(DTypeSize(loop->backend_->kv_dtype()));
  const bool from_budget = so.kv.num_blocks <= 0;
  int64_t probe = 0;
  const bool from_device = from_budget && !options.kv_cache_bytes_set && loop->backend_->MemoryInfo(&probe, &probe);
  if (from_device) {
    ASSIGN_OR_RETURN(so.kv.num_blocks, BlocksFromDeviceMemory(loop->model_.get(), loop->backend_.get(), so,
                                                              options.cuda.gpu_memory_utilization, per_token));
    options.kv_cache_bytes = int64_t{so.kv.num_blocks} * so.kv.block_size * per_token;
  } else if (from_budget) {
    ASSIGN_OR_RETURN(so.kv.num_blocks, NumBlocksForBudget(options.kv_cache_bytes, per_token, so.kv.block_size));
  }
  CapModelLenAtKvCache(auto_len, &so);
  ASSIGN_OR_RETURN(loop->cache_, loop->model_->CreateKvCache(so.kv.num_blocks, so.kv.block_size));
  if (loop->group_) {
    RETURN_IF_ERROR(loop->group_->Start(Status::Ok(), so.kv.num_blocks, so.kv.block_size, so.limits.max_model_len));
  }
  LogInfo("kv cache: {} blocks x {} tokens ({} tokens, {:.1f} MiB, {} B/token; {})", so.kv.num_blocks,
          so.kv.block_size, int64_t{so.kv.num_blocks} * so.kv.block_size, loop->cache_->bytes() / 1048576.0,
          per_token,
          from_device   ? fmt::format("from --gpu-memory-utilization {:.2f}", options.cuda.gpu_memory_utilization)
          : from_budget ? fmt::format("budget {:.1f} MiB", options.kv_cache_bytes / 1048576.0)
                             : std::string("block count set explicitly"));
  RETURN_IF_ERROR(loop->model_->SetMaxModelLen(so.limits.max_model_len));
  if (loop->backend_->SupportsGraphs()) {
    RETURN_IF_ERROR(loop->model_->EnableGraphs(so.max_num_seqs, so.limits.max_model_len, so.kv.block_size));
  }
  if (options.speculative) so.num_lookahead_tokens = options.speculative->num_speculative_tokens;
  RETURN_IF_ERROR(loop->InitKvConnectors(options, so));
  ASSIGN_OR_RETURN(loop->scheduler_, Scheduler::Create(std::move(so)));
  RETURN_IF_ERROR(loop->InitSpeculation(options));
  loop->next_seed_ = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  if (options.weights_digest) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(WeightsDigestResult wd, ComputeWeightsDigest(options.model_dir, *options.weights_digest));
    loop->weights_digest_ = ToHex(wd.digest);
    LogInfo("weights digest {} ({}, {:.0f} ms; cache {})", loop->weights_digest_,
            wd.from_cache ? "cached" : "computed",
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
            wd.cache_path.empty() ? std::string("none: no writable place") : wd.cache_path);
  }
  loop->metrics_ = loop->scheduler_->metrics();
  loop->on_finished_ = std::move(options.on_finished);
  loop->step_budget_ = StepBudget(options.max_step_ms);
  loop->step_budget_.Init(loop->scheduler_.get());
  loop->on_step_ = std::move(options.on_step);
  return loop;
}

EngineLoop::~EngineLoop() { Stop(); }

StatusOr<RequestStreamPtr> EngineLoop::Submit(Request request, std::function<void()> notify) {
  // The front end validated it (ValidateRequest); the id is the loop's to check.
  if (request.id.empty()) return InvalidArgument("request id must not be empty");
  RETURN_IF_ERROR(group_error());
  if ((request.export_kv || request.remote_kv) && !transfer_) {
    return InvalidArgument("'kv_transfer_params': this instance has no KV transfer (serve it with --role prefill "
                           "or --role decode)");
  }
  if (request.remote_kv) RETURN_IF_ERROR(transfer_->CheckSource(*request.remote_kv));
  std::lock_guard lock(mu_);
  if (stop_) return Status(StatusCode::kUnavailable, "the engine is shutting down");
  if (!live_ids_.insert(request.id).second) {
    return InvalidArgument("request id '" + request.id + "' is already in use");
  }
  const uint64_t seed = request.params.seed ? *request.params.seed : Mix(next_seed_++);
  auto stream = std::make_shared<RequestStream>(request.id, request.params.n, std::move(notify));
  stream->seed_ = seed;
  stream->seed_drawn_ = !request.params.seed.has_value();
  SamplerConfig sampler = ToSamplerConfig(request.params, seed);
  inbox_.push_back({std::move(request), stream, std::move(sampler)});
  cv_.notify_all();
  return stream;
}

void EngineLoop::Abort(const std::string& request_id) {
  std::lock_guard lock(mu_);
  aborts_.push_back(request_id);
  cv_.notify_all();
}

void EngineLoop::AbortAll() {
  std::lock_guard lock(mu_);
  aborts_.insert(aborts_.end(), live_ids_.begin(), live_ids_.end());
  cv_.notify_all();
}

void EngineLoop::FinishChoice(const std::string& request_id, int32_t index, FinishReason reason) {
  std::lock_guard lock(mu_);
  choice_ends_.push_back({request_id, index, reason});
  cv_.notify_all();
}

Status EngineLoop::Start() {
  std::lock_guard lock(mu_);
  if (started_) return FailedPrecondition("engine loop already started");
  started_ = true;
  stop_ = false;
  thread_ = std::thread([this] { ThreadMain(); });
  return Status::Ok();
}

void EngineLoop::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!kv_workers_.empty()) {
    StopKvConnectors();  // offline use (no loop thread), or a no-op after ThreadMain's
    std::lock_guard lock(mu_);
    metrics_ = scheduler_->metrics();  // blocks freed since the last step's snapshot
  }
  if (group_) group_->Stop();
}

void EngineLoop::ThreadMain() {
  while (true) {
    {
      std::unique_lock lock(mu_);
      // scheduler_ is read here only by this (the loop) thread.
      // After a step that ran nothing while pulls are in flight (their blocks
      // may be what a waiting request needs), only an event can change that.
      const bool stalled = last_plan_empty_ && KvLoadsInFlight();
      cv_.wait(lock, [&] {
        return stop_ || kv_wake_ || !inbox_.empty() || !aborts_.empty() || !choice_ends_.empty() ||
               (scheduler_->HasUnfinished() && !scheduler_->WaitingOnLoadsOnly() && !stalled);
      });
      if (stop_) break;
    }
    Status s = Step();
    if (!s.ok()) {
      LogError("engine loop: step failed: {}", s.ToString());
      FailAll(s);
    }
  }
  // Abort what is left.
  DrainInbox();
  for (auto& [id, a] : active_) (void)scheduler_->AbortRequest(id);
  StopKvConnectors();
  DeliverFinished();
  FailAll(Status(StatusCode::kUnavailable, "the engine stopped"));
}

void EngineLoop::FailAll(const Status& status) {
  std::vector<std::string> ids;
  for (auto& [id, a] : active_) {
    a.stream->Fail(status);
    ids.push_back(id);
  }
  for (const std::string& id : ids) {
    (void)scheduler_->AbortRequest(id);
    EndRequest(id);
  }
  (void)scheduler_->TakeFinishedStats();
}

Status EngineLoop::RunUntilDone() {
  {
    std::lock_guard lock(mu_);
    if (started_) return FailedPrecondition("RunUntilDone: the loop thread is running");
  }
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (inbox_.empty() && aborts_.empty() && choice_ends_.empty() && !scheduler_->HasUnfinished() &&
          !KvLoadsInFlight()) {
        return Status::Ok();
      }
    }
    const bool pulls_only = KvLoadsInFlight() && (last_plan_empty_ || !scheduler_->HasUnfinished());
    if (pulls_only || scheduler_->WaitingOnLoadsOnly()) {
      std::unique_lock lock(mu_);  // nothing to run until a tier fetch or a pull answers
      cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return kv_wake_; });
    }
    Status s = Step();
    if (!s.ok()) {
      FailAll(s);
      return s;
    }
  }
}

void EngineLoop::DrainInbox() {
  std::vector<Pending> pending;
  std::vector<std::string> aborts;
  std::vector<ChoiceEnd> ends;
  {
    std::lock_guard lock(mu_);
    pending.swap(inbox_);
    aborts.swap(aborts_);
    ends.swap(choice_ends_);
  }
  for (Pending& p : pending) {
    Active a;
    a.stream = p.stream;
    a.sampler = std::move(p.sampler);
    a.min_tokens = p.request.params.min_tokens;
    if (p.request.params.prompt_logprobs) a.prompt_logprobs = *p.request.params.prompt_logprobs;
    a.seeded = p.request.params.seed.has_value();
    if (a.min_tokens > 0) {
      a.banned = p.request.params.stop_token_ids;
      if (!p.request.params.ignore_eos) {
        const auto& eos = scheduler_->options().eos_token_ids;
        a.banned.insert(a.banned.end(), eos.begin(), eos.end());
      }
    }
    if (p.request.params.constraint) {
      a.constraint = p.request.params.constraint;
      a.constraint_field = p.request.params.constraint_field.empty() ? "constraint" : p.request.params.constraint_field;
      a.matchers.resize(static_cast<size_t>(std::max(p.request.params.n, 1)));
      // EOS even with ignore_eos (it then does not stop the sequence, and is special text).
      a.end_tokens = scheduler_->options().eos_token_ids;
      a.end_tokens.insert(a.end_tokens.end(), p.request.params.stop_token_ids.begin(),
                          p.request.params.stop_token_ids.end());
    }
    const std::string id = p.request.id;
    Status s = scheduler_->AddRequest(std::move(p.request));
    if (!s.ok()) {
      p.stream->Fail(s);
      std::lock_guard lock(mu_);
      live_ids_.erase(id);
      continue;
    }
    active_.emplace(id, std::move(a));
  }
  for (const std::string& id : aborts) {
    if (active_.count(id)) (void)scheduler_->AbortRequest(id);
  }
  for (const ChoiceEnd& e : ends) {
    if (active_.count(e.request_id)) (void)scheduler_->FinishSequence(e.request_id, e.index, e.reason);
  }
}

Status EngineLoop::Step() {
  DrainInbox();
  RunKvConnectors();
  const bool ran = scheduler_->HasUnfinished();
  Status s = ran ? RunStep() : Status::Ok();
  DeliverFinished();
  // Host copy of the model's expert counters (plain numbers; no tensors here).
  StatusOr<ExpertLoad> load = ran && s.ok() && model_->config().is_moe() ? model_->ReadExpertLoad()
                                                                         : StatusOr<ExpertLoad>(ExpertLoad{});
  std::lock_guard lock(mu_);
  if (load.ok() && !load->empty()) expert_load_ = std::move(*load);
  metrics_ = scheduler_->metrics();
  metrics_.spec = spec_counters_;
  ++steps_;
  return s;
}

Status EngineLoop::RunStep() {
  const SchedulerOutput plan = scheduler_->Schedule();
  last_plan_empty_ = plan.empty();
  if (plan.empty()) return Status::Ok();
  // Before the step: its sequences are still known to the scheduler.
  sim::StepShape shape;
  if (on_step_) {
    shape = sim::ShapeOf(plan, *scheduler_);
    shape.ordinal = shaped_steps_++;
  }
  const auto start = std::chrono::steady_clock::now();
  Status s = RunPlan(plan);
  if (!s.ok()) return s;
  using std::chrono::nanoseconds;
  const int64_t took_ns = std::chrono::duration_cast<nanoseconds>(std::chrono::steady_clock::now() - start).count();
  const int64_t logprob_ns = std::chrono::duration_cast<nanoseconds>(step_prompt_logprob_time_).count();
  step_budget_.Update(plan, took_ns, step_prompt_logprob_rows_, logprob_ns, scheduler_.get());
  if (on_step_) on_step_(plan, shape, took_ns);
  return s;
}

Status EngineLoop::RunPlan(const SchedulerOutput& plan) {
  for (const CopyOp& op : plan.copies) RETURN_IF_ERROR(cache_->CopyBlock(op.src, op.dst));
  if (proposer_) {
    for (const auto* ids : {&plan.preempted, &plan.finished}) {
      for (SeqId id : *ids) {
        proposer_->Forget(id);
        draft_probs_.erase(id);
      }
    }
    for (SeqId id : plan.finished) acceptance_.erase(id);
    if (!proposer_->CopyBlocks(plan.copies).ok()) {
      // The draft KV of these blocks is stale: worse proposals, same output.
      LogWarn("speculative decoding: draft KV block copy failed");
    }
  }
  ASSIGN_OR_RETURN(ForwardBatch batch, MakeForwardBatch(plan, cache_->block_size()));
  step_prompt_logprob_rows_ = 0;
  step_prompt_logprob_time_ = {};
  const int64_t vocab = model_->config().vocab_size;
  // Structured-output masks depend only on the tokens so far: computed on a
  // persistent helper thread while the forward pass runs.
  std::vector<MaskJob> jobs = CollectMaskJobs(plan, vocab);
  if (!jobs.empty()) mask_worker_.Start([&jobs] { FillMasks(jobs); });
  Status forward;
  if (group_) {
    std::vector<std::pair<int64_t, int64_t>> copies;
    for (const CopyOp& op : plan.copies) copies.emplace_back(op.src, op.dst);
    forward = group_->Step(*model_, cache_.get(), copies, batch, &logits_);
  } else {
    forward = model_->Forward(batch, cache_.get(), &logits_);
  }
  mask_worker_.Wait();
  RETURN_IF_ERROR(forward);
  FailOverBudget(jobs);
  std::unordered_map<SeqId, const MaskJob*> job_of;
  for (const MaskJob& j : jobs) job_of[j.seq_id] = &j;

  std::vector<SampledTokens> sampled;
  std::unordered_map<SeqId, std::vector<SampleResult>> results;
  int64_t row = 0;
  for (const ScheduledSequence& s : plan.seqs) {
    const int64_t rows = std::min<int64_t>(s.num_logits, static_cast<int64_t>(s.token_ids.size()));
    const int64_t first_row = row;
    row += rows;
    if (rows > 0) {
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t n = CollectPromptLogprobs(s, first_row, rows, vocab);
      if (n > 0) {
        step_prompt_logprob_rows_ += n;
        step_prompt_logprob_time_ += std::chrono::steady_clock::now() - t0;
      }
    }
    if (!s.sample) continue;
    if (rows == 0) return Internal("engine loop: sampled sequence without logits rows");
    const Sequence* seq = scheduler_->GetSequence(s.seq_id);
    auto it = active_.find(s.request_id);
    if (seq == nullptr || it == active_.end()) return Internal("engine loop: unknown scheduled sequence");
    const Active& a = it->second;
    const std::span<const int32_t> all(seq->token_ids);
    SampleContext ctx;
    ctx.prompt_tokens = all.first(static_cast<size_t>(seq->num_prompt_tokens));
    ctx.output_tokens = all.subspan(static_cast<size_t>(seq->num_prompt_tokens));
    const auto job = job_of.find(s.seq_id);
    const MaskJob* mj = job == job_of.end() ? nullptr : job->second;
    // A complete document leaves only EOS: min_tokens does not ban it then.
    if (seq->num_output_tokens() < a.min_tokens && !(mj && mj->matcher->IsComplete())) ctx.banned_tokens = a.banned;
    if (mj) ctx.allowed_tokens = *mj->mask;
    ctx.choice_index = s.index;
    ctx.output_position = seq->num_output_tokens();
    if (s.num_draft_tokens > 0) {  // verify 1 + k rows
      VerifyResult v = VerifySequenceDrafts(s, *seq, a, logits_.data() + (row - 1 - s.num_draft_tokens) * vocab, vocab);
      SampledTokens t{s.seq_id, {}};
      for (const SampleResult& r : v.tokens) t.token_ids.push_back(r.token);
      sampled.push_back(std::move(t));
      results.emplace(s.seq_id, std::move(v.tokens));
      continue;
    }
    const std::span<const float> logits(logits_.data() + (row - 1) * vocab, static_cast<size_t>(vocab));
    SampleResult r = sampler_.Sample(logits, a.sampler, ctx);
    if (mj && std::find(a.end_tokens.begin(), a.end_tokens.end(), r.token) == a.end_tokens.end() &&
        !mj->matcher->AcceptToken(r.token) && !mask_reject_logged_) {
      LogWarn("structured output: request {} sampled token {} that its grammar rejects (logged once)",
              s.request_id, r.token);
      mask_reject_logged_ = true;
    }
    sampled.push_back({s.seq_id, {r.token}});
    results[s.seq_id].push_back(std::move(r));
  }
  // Prompt logprobs go out before the step's sampled tokens.
  for (auto& [request_id, entries] : prompt_logprobs_) {
    auto it = active_.find(request_id);
    if (it == active_.end() || entries.second.empty()) continue;
    RequestOutput out;
    out.index = entries.first;
    out.prompt_logprobs = std::move(entries.second);
    it->second.stream->Push(std::move(out));
  }
  prompt_logprobs_.clear();
  ASSIGN_OR_RETURN(std::vector<SequenceOutput> outputs, scheduler_->UpdateFromOutput(sampled));
  SaveKvBlocks();
  for (SequenceOutput& o : outputs) {
    auto it = active_.find(o.request_id);
    if (it == active_.end()) continue;
    RequestOutput out;
    out.index = o.index;
    out.finish_reason = o.finish_reason;
    out.num_cached_tokens = o.num_cached_tokens;
    out.cache_waterfall = o.cache_waterfall;
    const SamplerConfig& c = it->second.sampler;
    if ((c.logprobs || c.top_logprobs > 0) && !o.new_token_ids.empty()) {
      std::vector<SampleResult>& rs = results.at(o.seq_id);
      for (size_t i = 0; i < o.new_token_ids.size() && i < rs.size(); ++i) {
        out.logprobs.push_back({rs[i].logprob, std::move(rs[i].top)});
      }
    }
    out.token_ids = std::move(o.new_token_ids);
    if (out.finish_reason != FinishReason::kNone) {
      for (KvConnectorWorker* w : kv_workers_) w->OnFinalOutput(o.request_id, &out);
    }
    it->second.stream->Push(std::move(out));
  }
  if (proposer_) ProposeDrafts(plan);
  return Status::Ok();
}

std::vector<EngineLoop::MaskJob> EngineLoop::CollectMaskJobs(const SchedulerOutput& plan, int64_t vocab) {
  std::vector<MaskJob> jobs;
  for (const ScheduledSequence& s : plan.seqs) {
    if (!s.sample) continue;
    auto it = active_.find(s.request_id);
    if (it == active_.end() || !it->second.constraint) continue;
    Active& a = it->second;
    if (s.index < 0 || static_cast<size_t>(s.index) >= a.matchers.size()) continue;
    auto& m = a.matchers[static_cast<size_t>(s.index)];
    if (!m) m = a.constraint->NewMatcher();
    if (mask_buffers_.size() <= jobs.size()) mask_buffers_.emplace_back();
    std::vector<uint32_t>& buf = mask_buffers_[jobs.size()];
    buf.assign(static_cast<size_t>((vocab + 31) / 32), 0);
    jobs.push_back({s.seq_id, &s.request_id, m.get(), &a.end_tokens, &buf, Status::Ok()});
  }
  return jobs;
}

void EngineLoop::FailOverBudget(const std::vector<MaskJob>& jobs) {
  std::unordered_set<std::string> failed;  // a request's choices fail it once
  for (const MaskJob& j : jobs) {
    if (j.status.ok() || !failed.insert(*j.request_id).second) continue;
    auto it = active_.find(*j.request_id);
    if (it == active_.end()) continue;
    LogWarn("structured output: request {} failed: {}", *j.request_id, j.status.message());
    it->second.stream->Fail(InvalidArgument("'" + it->second.constraint_field + "': " + j.status.message()));
    (void)scheduler_->AbortRequest(*j.request_id);  // deferred to the step's end; its blocks free then
  }
}

void EngineLoop::FillMasks(std::vector<MaskJob>& jobs) {
  for (MaskJob& j : jobs) {
    std::vector<uint32_t>& mask = *j.mask;
    j.status = j.matcher->FillNextTokenMask(mask);
    // Over budget: the request fails after the forward; only an end token may be sampled meanwhile.
    if (!j.status.ok()) std::fill(mask.begin(), mask.end(), 0);
    bool any = false;
    for (uint32_t w : mask) any = any || w != 0;
    // Complete: EOS may come. A dead end (no token continues the grammar) ends too.
    if (j.matcher->CanEnd() || !any) {
      for (int32_t t : *j.end_tokens) {
        if (t >= 0 && static_cast<size_t>(t >> 5) < mask.size()) mask[t >> 5] |= uint32_t{1} << (t & 31);
      }
    }
  }
}

int64_t EngineLoop::CollectPromptLogprobs(const ScheduledSequence& s, int64_t first_row, int64_t rows,
                                          int64_t vocab) {
  auto it = active_.find(s.request_id);
  if (it == active_.end() || it->second.prompt_logprobs < 0) return 0;
  Active& a = it->second;
  const Sequence* seq = scheduler_->GetSequence(s.seq_id);
  if (seq == nullptr) return 0;
  int64_t done = 0;
  // Row r holds the distribution of the token after position p.
  const int64_t n = static_cast<int64_t>(s.token_ids.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = s.start_position + (n - rows) + r;
    if (p + 1 >= seq->num_prompt_tokens) break;  // the sampling row, not a prompt token
    if (p + 1 != a.next_prompt_logprob) continue;  // already reported (recompute or a fork)
    const std::span<const float> logits(logits_.data() + (first_row + r) * vocab, static_cast<size_t>(vocab));
    const double lse = LogSumExp(logits);
    const int32_t token = seq->token_ids[static_cast<size_t>(p + 1)];
    auto& entry = prompt_logprobs_[s.request_id];
    entry.first = s.index;
    entry.second.push_back({static_cast<float>(logits[token] - lse), TopLogprobs(logits, a.prompt_logprobs, lse)});
    ++a.next_prompt_logprob;
    ++done;
  }
  return done;
}

void EngineLoop::DeliverFinished() {
  SaveKvBlocks();
  for (const FinishedSequenceStats& st : scheduler_->TakeFinishedStats()) {
    if (on_finished_) on_finished_(st);
    auto it = active_.find(st.request_id);
    if (it == active_.end()) continue;
    RequestOutput out;
    out.index = st.index;
    out.finish_reason = st.reason;
    for (KvConnectorWorker* w : kv_workers_) w->OnFinalOutput(st.request_id, &out);
    it->second.stream->Push(std::move(out));  // ignored when the choice already ended
    if (it->second.stream->finished()) EndRequest(st.request_id);
  }
}

void EngineLoop::EndRequest(const std::string& request_id) {
  active_.erase(request_id);
  for (KvConnectorWorker* w : kv_workers_) w->ForgetRequest(request_id);
  std::lock_guard lock(mu_);
  live_ids_.erase(request_id);
}

SchedulerMetrics EngineLoop::metrics() const {
  std::lock_guard lock(mu_);
  return metrics_;
}

ExpertLoad EngineLoop::expert_load() const {
  std::lock_guard lock(mu_);
  return expert_load_;
}

int64_t EngineLoop::num_steps() const {
  std::lock_guard lock(mu_);
  return steps_;
}

}  // namespace tessera
