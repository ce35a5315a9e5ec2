// Sequence: the scheduler's per-choice state. A request with n choices runs as
// n sequences sharing one Request. Prefill and decode are one mechanism: the
// sequence has `token_ids` (prompt, then generated), of which the first
// `num_computed_tokens` have KV in the cache; each step computes the next few.
// Owned by the Scheduler; engine-loop thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "scheduler/block_hash.h"
#include "scheduler/cache_waterfall.h"
#include "scheduler/kv_cache_manager.h"
#include "scheduler/request.h"

namespace tessera {

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  SeqId id = 0;
  int32_t index = 0;  // choice index within its request, 0..n-1
  std::shared_ptr<const Request> request;

  std::vector<int32_t> token_ids;  // prompt + generated; KV exists for [0, num_computed_tokens)
  int64_t num_prompt_tokens = 0;
  int64_t num_computed_tokens = 0;
  int64_t max_output_tokens = 0;       // resolved max_tokens
  std::vector<int32_t> draft_token_ids;  // speculative proposals for the next step
  std::vector<BlockHash> block_hashes;   // chain over full blocks of token_ids

  SeqStatus status = SeqStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t priority = 0;
  int64_t arrival_order = 0;  // global admission order of its request (FCFS key)
  int32_t pending_forks = 0;  // index 0 only: choices 1..n-1 not yet forked
  // KV connectors (scheduler/kv_connector.h), index 0 only. Bit i: connector
  // i was offered this choice and has not been asked yet (PlanKvLoads).
  uint32_t kv_offers = 0;
  // The KV load in flight (PlanKvLoads .. FinishKvLoad), 0: none. Until it
  // ends the sequence is not admitted, and its blocks are not freed (even
  // when it ends): the load may still write them.
  uint64_t kv_load = 0;
  // Per leading prompt block: where a finished KV load got it (kPool: not
  // loaded). Read once, on the first admission (the cache waterfall).
  std::vector<CacheSource> loaded_from;
  // Retention (docs/architecture.md, "Retention"), index 0 only: hold the
  // first `blocks` prompt blocks until `until_ns`, each as soon as it is
  // cached; `retain_pending` until every one has been held.
  struct Hold {
    int64_t blocks = 0;
    int64_t until_ns = 0;
  };
  std::vector<Hold> retain;
  bool retain_pending = false;

  // Metrics.
  int64_t arrival_time_ns = 0;
  int64_t first_scheduled_ns = -1;
  int64_t num_cached_tokens = 0;  // prefix-cache hit on first admission
  CacheWaterfall cache_waterfall;  // the prompt's account, on first admission
  int32_t num_preemptions = 0;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool in_prefill() const { return num_computed_tokens < num_prompt_tokens; }
  const std::string& request_id() const { return request->id; }
  const SamplingParams& params() const { return request->params; }
  std::span<const uint64_t> cache_keys() const { return request->cache_keys; }
};

}  // namespace tessera
