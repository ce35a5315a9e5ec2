// Scheduler: iteration-level (continuous) batching over a paged KV cache.
// One step = Schedule() -> execute the plan -> UpdateFromOutput(). Each step:
//   1. running sequences first — decodes (1 token, or 1 + drafts when
//      speculating) before unfinished prefills — then
//   2. waiting sequences in policy order as prefill chunks (chunked prefill),
// within max_num_batched_tokens and max_num_seqs. When blocks run out the
// lowest-priority, latest-arriving running sequence is preempted (blocks
// freed, recomputed later — usually from the prefix cache). A request that
// could never fit alone is rejected at AddRequest, so the oldest/highest
// priority sequence always makes progress (see scheduler_property_test.cc
// for the stated wait bound).
//
// Thread-safety: none; every call comes from the engine-loop thread (the
// front end hands requests and aborts over through the loop's own queue).
// Abort/FinishSequence between Schedule and UpdateFromOutput are deferred to
// the end of UpdateFromOutput, so a plan's blocks stay valid while it runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "scheduler/kv_cache_manager.h"
#include "scheduler/kv_connector.h"
#include "scheduler/request.h"
#include "scheduler/retention_ledger.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/scheduler_output.h"
#include "scheduler/sequence.h"

namespace tessera {

// Admission order and preemption victim choice. kFcfs: arrival order.
// kPriority: lower SamplingParams::priority first, then arrival.
enum class SchedulingPolicy { kFcfs, kPriority };

struct SchedulerOptions {
  int32_t max_num_seqs = 256;
  // Must be >= max_num_seqs. Speculative drafts count against it but never
  // take a running sequence's one real token, nor (while prefills are
  // pending) more than half of it, so chunked prefills keep progressing.
  int64_t max_num_batched_tokens = 2048;
  int64_t max_waiting_seqs = 4096;        // admission bound (429 beyond it)
  int32_t num_lookahead_tokens = 0;       // speculative tokens per step (k)
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  KvCacheOptions kv;
  ModelLimits limits;
  std::vector<int32_t> eos_token_ids;
  std::function<int64_t()> clock;  // monotonic ns; default steady_clock
  // Where KV blocks come from or go to besides this instance's forward passes
  // (scheduler/kv_connector.h), in the order they are offered a request. Not
  // owned: each must outlive the Scheduler's use of it.
  std::vector<KvConnector*> kv_connectors;
  // Retention budgets (scheduler/retention_ledger.h) and the lower tier that
  // takes over retained blocks the pool needs (null: none, so they stay).
  RetentionOptions retention;
  RetainedBlockDemoter* retention_demoter = nullptr;
};

class Scheduler {
 public:
  static StatusOr<std::unique_ptr<Scheduler>> Create(SchedulerOptions options);

  // Queues a request (n choices) the front end validated (ValidateRequest).
  // INVALID_ARGUMENT for an id already live, a request that could never fit
  // in the KV cache even alone, or a retention no budget can ever hold;
  // RESOURCE_EXHAUSTED when the waiting queue is full or the retention budget
  // is taken now; INTERNAL when CheckRequestInvariants fails (it was not validated).
  Status AddRequest(Request request);

  // Ends every choice of `request_id` and frees its blocks. NOT_FOUND if unknown.
  Status AbortRequest(const std::string& request_id);

  // Ends one choice from outside (the front end matched a stop string).
  Status FinishSequence(const std::string& request_id, int32_t index, FinishReason reason);

  // Speculative proposals for a running sequence's next step (at most
  // num_lookahead_tokens). Rolled back by UpdateFromOutput if rejected.
  Status SetDraftTokens(SeqId seq, std::vector<int32_t> draft_token_ids);

  // Before proposing: makes `seq`'s blocks cover positions < num_tokens +
  // num_drafts (a draft model writes its KV there; the next step verifies
  // there), allocating without preempting. Returns how many drafts fit (0 for
  // a sequence that is not running between steps).
  int32_t ReserveDraftSlots(SeqId seq, int32_t num_drafts);
  // Caps the tokens of the following steps (time-bounded steps: the engine
  // loop sets it from measured step time) at max(tokens, the running decodes'
  // tokens + kMinStepPrefillTokens), never above max_num_batched_tokens, so
  // decodes are never starved and prefills always progress. 0: no cap.
  void SetStepTokenBudget(int64_t tokens) { step_token_budget_ = tokens; }
  int64_t step_token_budget() const { return step_token_budget_; }
  static constexpr int64_t kMinStepPrefillTokens = 16;
  // Caps the prompt tokens of prompt_logprobs requests per step (each one is
  // a logits row the loop turns into logprobs: far dearer than a plain prefill
  // token; the loop sets it from measured row time), never below
  // kMinStepPrefillTokens a step so they progress. 0: no cap.
  void SetStepPromptLogprobRows(int64_t rows) { step_prompt_logprob_rows_ = rows; }

  // Plans the next step. Advances the scheduled sequences' computed counts;
  // the caller must run the plan and call UpdateFromOutput before the next
  // Schedule (when the plan is non-empty).
  SchedulerOutput Schedule();

  // Applies the sampled tokens of the last plan: appends tokens, rolls back
  // rejected drafts, checks stop conditions (EOS unless ignore_eos,
  // stop_token_ids, min_tokens, max_tokens, context length), registers
  // computed blocks in the prefix cache and frees finished sequences.
  // FAILED_PRECONDITION (no change) if `sampled` does not match the plan.
  StatusOr<std::vector<SequenceOutput>> UpdateFromOutput(std::span<const SampledTokens> sampled);

  // KV connectors (scheduler/kv_connector.h; scheduler_kv.cc): the scheduler
  // decides which blocks move, the connectors' executor halves move them,
  // asynchronously: other requests keep being scheduled meanwhile.
  //
  // Between steps: asks `connector` about each waiting first choice offered
  // to it and not yet asked (once per offer), and plans a load where the
  // source can supply leading prompt blocks the pool lacks (never the last
  // prompt token). The connector hears of each outcome (OnLoadPlanned /
  // OnNoLoad). A planned sequence is not admitted until FinishKvLoad.
  void PlanKvLoads(const KvConnector& connector);
  // kAfterLookup loads: the source has the first `num_blocks` blocks of load
  // `id`. Allocates pool blocks for those the pool still lacks and returns
  // them (the block index of the first in *first_block); empty when nothing
  // is to be written (the sequence ended, the pool lost the blocks before the
  // loaded ones, no room now, or a step is in flight). Between steps; always
  // followed by FinishKvLoad(id).
  std::vector<BlockId> AllocateKvLoad(uint64_t id, int64_t num_blocks, int64_t* first_block);
  // Ends load `id`, exactly once, between steps. ok: the blocks written join
  // the prefix cache, so the sequence's admission finds them as a hit;
  // otherwise they are freed uncached and the prompt is computed here. A
  // sequence that ended meanwhile has its blocks freed now. `sources` (the
  // cache waterfall): where each block of the plan came from, in plan order
  // (block plan.first_block + i); empty or short: the connector's source().
  void FinishKvLoad(uint64_t id, bool ok, std::span<const CacheSource> sources = {});
  // Frees the blocks a finished request holds for a connector (HoldsOnFinish):
  // the other side acknowledged them, or their pin timed out. Unknown ids: no-op.
  void ReleaseKvHold(const std::string& request_id);
  int64_t num_kv_holds() const { return static_cast<int64_t>(kv_holds_.size()); }
  // Every unfinished sequence waits for a KV load: no step can run now.
  bool WaitingOnLoadsOnly() const;

  bool HasUnfinished() const { return !seqs_.empty(); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  const Sequence* GetSequence(SeqId seq) const;

  SchedulerMetrics metrics() const;
  // Drains one record per sequence ended since the last call; the engine loop
  // calls this every step (it grows until drained).
  std::vector<FinishedSequenceStats> TakeFinishedStats();

  const KvCacheManager& kv_cache() const { return *kv_; }
  KvCacheManager& mutable_kv_cache() { return *kv_; }
  const SchedulerOptions& options() const { return options_; }
  const RetentionLedger& retention() const { return retention_; }

 private:
  struct KeyLess {
    bool by_priority = false;
    bool operator()(const Sequence* a, const Sequence* b) const;
  };
  struct PlanEntry {
    SeqId seq = 0;
    int32_t num_drafts = 0;
    bool sample = false;
  };
  Scheduler(SchedulerOptions options, std::unique_ptr<KvCacheManager> kv);

  Sequence* NewSequence(std::shared_ptr<const Request> request, int32_t index, int64_t arrival_order,
                        int64_t arrival_ns);
  void ResolveForks();
  std::vector<Sequence*> ReleaseForks(Sequence* leader);  // returns the new waiting choices
  int64_t NumNewTokens(const Sequence& seq, int64_t budget) const;
  int64_t DraftBudget(const std::vector<Sequence*>& running, int64_t budget) const;
  void InsertRunning(Sequence* seq);
  void EraseRunning(Sequence* seq);
  void Preempt(Sequence* seq);
  void UpdateHashes(Sequence* seq);
  // Checks `request`'s retention against the budgets and books it; the holds
  // (blocks, until) to apply as its blocks are cached.
  StatusOr<std::vector<Sequence::Hold>> AdmitRetention(const Request& request, int64_t now_ns);
  // Holds what `seq` asked to retain among its cached blocks.
  void ApplyRetention(Sequence* seq);
  FinishReason CheckStop(const Sequence& seq, int32_t token) const;
  // Ends `seq` (frees blocks, records stats) and destroys it.
  void Finish(Sequence* seq, FinishReason reason);

  SchedulerOptions options_;
  std::unique_ptr<KvCacheManager> kv_;
  KeyLess key_less_;
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;           // every live sequence
  std::unordered_map<std::string, std::vector<SeqId>> requests_;        // request id -> live seqs
  std::vector<Sequence*> running_;                                      // sorted by key_less_
  std::set<Sequence*, KeyLess> waiting_;                                // policy order
  std::vector<PlanEntry> plan_;                                         // last plan, until updated
  bool in_flight_ = false;
  std::vector<std::pair<SeqId, FinishReason>> deferred_;                // finishes during a step
  std::vector<SeqId> finished_since_plan_;
  std::vector<FinishedSequenceStats> finished_stats_;
  SchedulerCounters counters_;
  RetentionLedger retention_;
  // KV connectors (scheduler_kv.cc).
  struct KvLoadState {
    KvLoadPlan plan;
    KvConnector* connector = nullptr;
    int64_t end_block = 0;  // the sequence's leading blocks valid once the load succeeds
    int64_t start_block = 0;  // the first block the load writes (earlier ones the pool held)
  };
  void OfferKv(Sequence* seq, bool after_preemption);
  // Ends the offers `seq` never got to (it finished first).
  void DropKvOffers(Sequence* seq);
  // Keeps a finished sequence's blocks for the connector that holds it; false: none does.
  bool HoldKv(Sequence* seq);
  // The cache waterfall of `seq`'s prompt on its first admission with
  // `hit_tokens` found cached (scheduler/cache_waterfall.h).
  CacheWaterfall AccountPrompt(const Sequence& seq, int64_t hit_tokens) const;
  ComputeReason MissReason(const Sequence& seq, int64_t block, int64_t full_blocks) const;
  std::unordered_map<uint64_t, KvLoadState> kv_loads_;  // loads in flight, by id
  uint64_t next_kv_load_ = 1;
  std::unordered_map<std::string, SeqId> kv_holds_;  // request id -> KV holder id (sequence gone)
  bool wants_computed_blocks_ = false;  // some connector saves computed blocks
  SeqId next_seq_id_ = 1;
  int64_t step_token_budget_ = 0;
  int64_t step_prompt_logprob_rows_ = 0;
  int64_t next_arrival_ = 0;
};

}  // namespace tessera
