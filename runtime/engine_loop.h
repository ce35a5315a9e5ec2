// EngineLoop: the single engine-loop thread (docs/architecture.md, "Runtime"). Owns the Scheduler,
// the Model (on a CPU backend), its paged KvCache and a Sampler, and runs
// steps: Schedule -> plan.copies -> MakeForwardBatch -> Model::Forward ->
// sample each sampled row -> Scheduler::UpdateFromOutput -> push outputs.
//
// Threading: Submit/Abort may be called from any thread; they hand work to
// the loop through a mutex-guarded inbox and wake it with a condvar. Outputs
// come back through a per-request RequestStream (its own mutex + condvar).
// Either Start() a loop thread (serving) or call RunUntilDone()/Step() on one
// thread of your choice (offline, tests) — never both.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/parallel/shard/rank_group.h"
#include "engine/sampling.h"
#include "engine/weights_digest.h"
#include "runtime/kv_connectors/tier_connector.h"
#include "runtime/kv_connectors/transfer_connector.h"
#include "runtime/mask_worker.h"
#include "runtime/sim/cost_model.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_budget.h"
#include "runtime/spec/acceptance.h"
#include "runtime/spec/proposer.h"
#include "runtime/spec/spec_config.h"
#include "runtime/spec/spec_policy.h"
#include "scheduler/token_constraint.h"

namespace tessera {

struct EngineLoopOptions {
  std::string model_dir;
  std::string device = "cpu";  // cpu | cuda
  int num_threads = 0;  // CPU backend threads; 0: all
  // device == "cuda". Unless the KV pool is set explicitly (kv_cache_bytes_set
  // or scheduler.kv.num_blocks), it gets what gpu_memory_utilization leaves after
  // the weights and a profiled forward of max_num_batched_tokens.
  CudaBackendOptions cuda;
  // KV pool budget in bytes; the block count is derived from the model's
  // per-token KV size (logged). scheduler.kv.num_blocks > 0 overrides it.
  int64_t kv_cache_bytes = int64_t{512} << 20;
  bool kv_cache_bytes_set = false;  // the user gave kv_cache_bytes (on a GPU: no profiling)
  // limits.vocab_size (0) and eos_token_ids (empty) are filled from the
  // model; limits.max_model_len is capped at max_position_embeddings (and is
  // max_position_embeddings when <= 0, then at most what the KV cache holds).
  SchedulerOptions scheduler;
  // Speculative decoding (--speculative-config); scheduler.num_lookahead_tokens
  // is set from it. See engine_loop_spec.cc.
  std::optional<SpeculativeConfig> speculative;
  // Fault-injection seam for tests: wraps the proposer built from `speculative`.
  std::function<std::unique_ptr<Proposer>(std::unique_ptr<Proposer>)> wrap_proposer;
  // Time-bounded steps: when > 0, the loop measures the time per scheduled
  // token and caps each step's tokens so a step takes about this long (see
  // Scheduler::SetStepTokenBudget). An abort waits at most one step, so this
  // bounds how long a cancelled request holds its blocks and the engine.
  // 0: steps are bounded by max_num_batched_tokens only (offline throughput).
  double max_step_ms = 0;
  // Called on the loop thread after each step that ran a plan, with the plan,
  // its composition as the twin's cost model reads it (sim::ShapeOf, taken
  // before the step ran; ordinal: this loop's count of non-empty steps) and
  // the nanoseconds it took as time-bounded steps measure it (StepBudget gets
  // the same number): the twin's decision-equality test, `tessera calibrate`
  // and the server's step-time metrics record the real loop through it.
  // Cheap; must not call back into the loop.
  std::function<void(const SchedulerOutput& plan, const sim::StepShape& shape, int64_t step_ns)> on_step;
  // Called on the loop thread as each sequence ends (metrics: queue time,
  // finish reasons). Must be cheap and must not call back into the loop.
  std::function<void(const FinishedSequenceStats&)> on_finished;
  // Tensor/expert parallelism (engine/parallel/shard/rank_group.h): with more
  // than one rank this loop is rank 0 and runs every step on the whole group.
  parallel::GroupOptions parallel;
  // Prefill/decode disaggregation (--role prefill|decode): a KvTransport over
  // this loop's KV pool (CPU only). Requests may then carry Request::remote_kv
  // or Request::export_kv; without it such requests are refused.
  std::optional<KvTransportOptions> kv_transfer;
  // Called on the loop thread after each pull attempt (metrics), when the
  // loop applies the pull's answer. Cheap.
  std::function<void(const KvPullEvent&)> on_kv_pull;
  // KV tiers below the pool (--kv-offload-*; kv_connectors/tier_connector.h):
  // computed blocks spill to them, prompts missing from the pool are fetched
  // back before their prefill. The loop fills in fingerprint, layout,
  // block_bytes and notify. Needs prefix caching and a single rank.
  std::optional<KvTierOptions> kv_tiers;
  // Receipts (docs/architecture.md, "Receipts"): when set, Create computes the
  // checkpoint's weights digest (engine/weights_digest.h: cached beside the
  // model, so only the first load reads every byte).
  std::optional<WeightsDigestOptions> weights_digest;
};


struct TokenLogprobs {
  float logprob = 0.0f;            // raw log-softmax of the sampled token
  std::vector<TokenLogprob> top;   // top_logprobs alternatives
};

// One increment of one choice of a request.
struct RequestOutput {
  int32_t index = 0;                    // choice index
  std::vector<int32_t> token_ids;       // new tokens
  std::vector<TokenLogprobs> logprobs;  // one per new token when logprobs/top_logprobs asked
  // With prompt_logprobs: entries for the next prompt positions, in order,
  // starting at position 1 (position 0 has no logprob, as in vLLM/OpenAI).
  // Raw log-softmax of the prompt token plus that many alternatives.
  std::vector<TokenLogprobs> prompt_logprobs;
  FinishReason finish_reason = FinishReason::kNone;  // set on the choice's last output
  int64_t num_cached_tokens = 0;  // the choice's prompt tokens served from the prefix cache
  CacheWaterfall cache_waterfall;  // where those came from, why the rest were computed
  Status status;  // non-OK: the request failed (rejected or engine error); terminal for all choices
  // On the final output of an exported request (Request::export_kv).
  std::optional<KvExportInfo> kv_export;
};

// Per-request output queue; thread-safe. The loop pushes, a consumer pops.
class RequestStream {
 public:
  // `notify` (may be empty) runs after every Push/Fail, outside the lock, on
  // the pushing thread (the loop): it must be cheap and non-blocking, e.g.
  // post a wake-up to an executor. Consumers then drain with TryNext.
  RequestStream(std::string request_id, int32_t num_choices, std::function<void()> notify = {});
  const std::string& request_id() const { return request_id_; }
  // The RNG seed the request's choices sample with: its own, or the one the
  // loop drew for it (seed_drawn) — what a receipt records so a replay with
  // that seed gives the same tokens. Set before Submit returns the stream; any thread.
  uint64_t seed() const { return seed_; }
  bool seed_drawn() const { return seed_drawn_; }

  // Blocks until an output is available (true) or every choice has ended and
  // everything was read (false).
  bool Next(RequestOutput* out);
  // Non-blocking Next: false when nothing is queued right now.
  bool TryNext(RequestOutput* out);
  // Every choice has ended (outputs may still be queued).
  bool finished() const;

  // Loop side. Push ignores outputs of a choice that already ended.
  void Push(RequestOutput out);
  void Fail(const Status& status);  // ends every choice with `status`

 private:
  friend class EngineLoop;
  const std::string request_id_;
  const std::function<void()> notify_;
  uint64_t seed_ = 0;
  bool seed_drawn_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  std::vector<bool> ended_;
  int32_t remaining_;
};

using RequestStreamPtr = std::shared_ptr<RequestStream>;

class EngineLoop {
 public:
  static StatusOr<std::unique_ptr<EngineLoop>> Create(EngineLoopOptions options);
  ~EngineLoop();  // Stop()s

  // Queues a request the caller validated (ValidateRequest), after the
  // loop's own checks: a non-empty id unique among live requests, KV transfer
  // configured when asked. Later rejection by the scheduler (queue full, can
  // never fit, INTERNAL for a broken invariant) arrives on the stream as a
  // failed output. `notify`: see RequestStream. Any thread.
  StatusOr<RequestStreamPtr> Submit(Request request, std::function<void()> notify = {});
  // Ends every choice of the request at the next step (kAbort); unknown or
  // already finished ids are ignored. Any thread.
  void Abort(const std::string& request_id);
  // Aborts every live request at the next step (drain deadline). Any thread.
  void AbortAll();
  // Ends one choice at the next step with `reason` (the front end matched a
  // stop string): its KV blocks are freed and a final output with `reason`
  // follows on the stream unless the choice already ended. Any thread.
  void FinishChoice(const std::string& request_id, int32_t index, FinishReason reason);

  // Spawns the loop thread. Stop() finishes the current step, aborts what is
  // left (streams end with kAbort) and joins.
  Status Start();
  void Stop();

  // Offline: runs steps on the calling thread until every submitted request
  // has ended. FAILED_PRECONDITION while the loop thread runs.
  Status RunUntilDone();
  // One iteration (drain inbox, one scheduler step). Caller's thread; not with Start().
  Status Step();

  const ModelConfig& model_config() const { return model_->config(); }
  const SchedulerOptions& scheduler_options() const { return scheduler_->options(); }
  int64_t kv_cache_bytes() const { return cache_->bytes(); }
  // Snapshot taken at the end of each step; any thread.
  SchedulerMetrics metrics() const;
  // MoE models: tokens routed to each expert, as of the end of the last step
  // (empty for dense models). Any thread.
  ExpertLoad expert_load() const;
  int64_t num_steps() const;
  // Lower-case hex SHA-256 of the weights; "" unless options.weights_digest was set.
  const std::string& weights_digest() const { return weights_digest_; }
  // Parallel groups: OK while every rank is alive; after a rank failed, the
  // error (steps and new requests fail with it). Any thread.
  Status group_error() const { return group_ ? group_->error() : Status::Ok(); }
  // Per rank step and collective seconds (empty without a group). Any thread.
  std::vector<parallel::RankTimes> rank_times() const {
    return group_ ? group_->rank_times() : std::vector<parallel::RankTimes>{};
  }
  // Null unless options.kv_transfer was given.
  const KvTransport* kv_transport() const { return transfer_ ? transfer_->transport() : nullptr; }
  // Null unless options.kv_tiers was given. Its stats are thread-safe.
  KvTierManager* kv_tiers() const { return tiers_ ? &tiers_->tiers() : nullptr; }

 private:
  struct Pending {
    Request request;
    RequestStreamPtr stream;
    SamplerConfig sampler;
  };
  struct Active {
    RequestStreamPtr stream;
    SamplerConfig sampler;
    int32_t min_tokens = 0;
    std::vector<int32_t> banned;  // EOS (unless ignore_eos) + stop_token_ids, before min_tokens
    int32_t prompt_logprobs = -1;  // alternatives per prompt token; -1: not asked
    int64_t next_prompt_logprob = 1;  // next prompt position to report (recompute repeats are skipped)
    bool seeded = false;  // the request gave a seed: speculation keeps its tokens bitwise (acceptance.h)
    // Structured output (null: none): one matcher per choice, made at its first sample.
    std::shared_ptr<const TokenConstraint> constraint;
    std::vector<std::unique_ptr<TokenMatcher>> matchers;
    std::vector<int32_t> end_tokens;  // EOS + stop_token_ids: allowed when the output is complete
    std::string constraint_field;     // the request field that gave `constraint`
  };
  // One constrained sample of a step: its matcher and the mask computed for it.
  struct MaskJob {
    SeqId seq_id;
    const std::string* request_id;  // the plan's
    TokenMatcher* matcher;
    const std::vector<int32_t>* end_tokens;
    std::vector<uint32_t>* mask;
    Status status;  // not OK: the matcher went over its budget; the request fails (FailOverBudget)
  };
  EngineLoop() = default;

  void DrainInbox();
  Status RunStep();
  Status RunPlan(const SchedulerOutput& plan);
  void DeliverFinished();
  // Records prompt logprobs from a sequence's logits rows into
  // prompt_logprobs_; returns how many rows it turned into logprobs.
  int64_t CollectPromptLogprobs(const ScheduledSequence& s, int64_t first_row, int64_t rows, int64_t vocab);
  void EndRequest(const std::string& request_id);
  // KV connectors (engine_loop_kv.cc): built from the options before the
  // scheduler; each connector's worker runs before and after every step.
  Status InitKvConnectors(EngineLoopOptions& options, SchedulerOptions& so);
  void RunKvConnectors();   // before a step: answers in, loads planned and started
  void SaveKvBlocks();      // after a step: blocks out (spills, exports)
  bool KvLoadsInFlight() const;
  // Stops every connector's loads and applies their answers, so no block is
  // left held for a load. Loop thread, or after it ended.
  void StopKvConnectors();
  // Speculative decoding (engine_loop_spec.cc).
  Status InitSpeculation(const EngineLoopOptions& options);
  // Verifies a sequence's drafts against its 1 + k logits rows at `rows`.
  VerifyResult VerifySequenceDrafts(const ScheduledSequence& s, const Sequence& seq, const Active& a,
                            const float* rows, int64_t vocab);
  // After a step: proposes the next step's drafts for the sequences it ran.
  void ProposeDrafts(const SchedulerOutput& plan);
  void FailAll(const Status& status);
  void ThreadMain();
  // The constrained samples of `plan` (matchers made on first use).
  std::vector<MaskJob> CollectMaskJobs(const SchedulerOutput& plan, int64_t vocab);
  // Fills each job's mask (any thread): the matcher's tokens, plus the end tokens when the output may end.
  static void FillMasks(std::vector<MaskJob>& jobs);
  // Ends each request whose mask job failed with that error, naming its field.
  void FailOverBudget(const std::vector<MaskJob>& jobs);

  std::unique_ptr<parallel::RankGroup> group_;  // before model_: its shard uses the group's communicator
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;
  Sampler sampler_;
  std::vector<float> logits_;
  std::deque<std::vector<uint32_t>> mask_buffers_;  // reused across steps (deque: stable addresses)
  MaskWorker mask_worker_;  // fills them beside the forward pass
  bool mask_reject_logged_ = false;
  // This step's prompt logprobs per request: (choice index, entries).
  std::unordered_map<std::string, std::pair<int32_t, std::vector<TokenLogprobs>>> prompt_logprobs_;
  // Speculative decoding; proposer_ null when off.
  std::unique_ptr<Proposer> proposer_;
  SpeculativeConfig spec_config_;
  std::unordered_map<SeqId, std::vector<std::vector<float>>> draft_probs_;  // q of the pending drafts
  SpecDecodeCounters spec_counters_;
  std::unordered_map<SeqId, AcceptanceEstimate> acceptance_;  // per speculating sequence, for its k
  bool spec_failure_logged_ = false;

  // Loop-thread state.
  std::unordered_map<std::string, Active> active_;

  // Shared with front-end threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> inbox_;
  std::vector<std::string> aborts_;
  struct ChoiceEnd {
    std::string request_id;
    int32_t index;
    FinishReason reason;
  };
  std::vector<ChoiceEnd> choice_ends_;
  std::function<void(const FinishedSequenceStats&)> on_finished_;
  std::unordered_set<std::string> live_ids_;
  SchedulerMetrics metrics_;
  ExpertLoad expert_load_;
  int64_t steps_ = 0;
  uint64_t next_seed_ = 0;
  std::string weights_digest_;
  StepBudget step_budget_{0};  // time-bounded steps
  std::function<void(const SchedulerOutput&, const sim::StepShape&, int64_t)> on_step_;
  int64_t shaped_steps_ = 0;  // non-empty steps seen by on_step_ (StepShape::ordinal)
  // Prompt logprobs (a log-softmax and top-k over the vocabulary per prompt
  // token) are budgeted apart: this step's rows and their time (RunPlan -> step_budget_).
  int64_t step_prompt_logprob_rows_ = 0;
  std::chrono::steady_clock::duration step_prompt_logprob_time_{};
  bool stop_ = false;
  bool started_ = false;
  bool kv_wake_ = false;  // the transport released exports, a pull or a tier fetch finished; under mu_
  bool last_plan_empty_ = false;  // the last Schedule() planned nothing; loop thread
  std::thread thread_;
  // Last members: destroyed first (their threads read and write cache_
  // memory and wake mu_/cv_). The scheduler holds them as KvConnectors
  // (SchedulerOptions::kv_connectors) but never calls them on destruction.
  std::unique_ptr<TransferConnector> transfer_;  // --role prefill|decode, --kv-peer-fetch
  std::unique_ptr<TierConnector> tiers_;         // --kv-offload-*
  std::vector<KvConnectorWorker*> kv_workers_;   // the above, in the scheduler's order
};

}  // namespace tessera
