// Scheduler metrics hooks: plain counters, gauges and per-sequence records the
// server exports (names mirror vLLM's so dashboards carry over). No Prometheus
// dependency here; the engine loop copies these out between steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/request.h"

namespace tessera {

// Monotonic since start.
struct SchedulerCounters {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;      // prompt tokens computed (incl. recompute; excl. cache hits)
  int64_t generation_tokens = 0;  // tokens accepted into outputs
  int64_t prefix_cache_queries = 0;  // tokens looked up   (vllm:prefix_cache_queries)
  int64_t prefix_cache_hits = 0;     // tokens found cached (vllm:prefix_cache_hits)
  int64_t preemptions = 0;           // (vllm:num_preemptions)
  int64_t cow_copies = 0;
  int64_t evictions = 0;
  int64_t requests_added = 0;
  int64_t requests_rejected = 0;     // invalid or can never fit
  int64_t requests_queue_full = 0;   // bounced by the waiting-queue limit (429)
  int64_t seqs_finished_stop = 0;
  int64_t seqs_finished_length = 0;
  int64_t seqs_aborted = 0;
  // Disaggregation (decode side): prompt blocks pulled from a prefill instance,
  // found in the local prefix cache instead, and pulls that failed (recomputed).
  int64_t kv_blocks_pulled = 0;
  int64_t kv_blocks_reused = 0;
  int64_t kv_pull_failures = 0;
  int64_t kv_exports = 0;  // prefill side: requests whose blocks were pinned for a decode
  // Retention (docs/architecture.md, "Retention"): requests refused because
  // their retained prefix can never fit a budget (400) or does not fit now (429).
  int64_t retention_rejected_too_large = 0;
  int64_t retention_rejected_full = 0;
};

struct SchedulerGauges {
  int64_t num_running = 0;  // sequences (vllm:num_requests_running)
  int64_t num_waiting = 0;  // sequences, incl. preempted (vllm:num_requests_waiting)
  double kv_usage = 0.0;    // fraction of blocks in use (vllm:kv_cache_usage_perc)
  int64_t num_exported = 0; // prefill side: requests whose blocks are pinned for a decode
  int64_t retained_blocks = 0;  // device-pool blocks held by an unexpired retention
};

// Speculative decoding, monotonic (vLLM's spec_decode_* counters). Filled by
// the engine loop, which runs proposers and verification.
struct SpecDecodeCounters {
  int64_t num_drafts = 0;           // sequence-steps that verified drafts
  int64_t num_draft_tokens = 0;     // drafts verified
  int64_t num_accepted_tokens = 0;  // drafts accepted
  std::vector<int64_t> num_accepted_tokens_per_pos;  // [k]: drafts accepted at position i
  int64_t num_proposer_failures = 0;  // steps that fell back to plain decode
};

struct SchedulerMetrics {
  SchedulerCounters counters;
  SchedulerGauges gauges;
  SpecDecodeCounters spec;
  double prefix_cache_hit_rate() const {
    return counters.prefix_cache_queries == 0
               ? 0.0
               : static_cast<double>(counters.prefix_cache_hits) / counters.prefix_cache_queries;
  }
};

// One per sequence as it ends; histogram-ready (queue time etc.).
struct FinishedSequenceStats {
  std::string request_id;
  int32_t index = 0;
  FinishReason reason = FinishReason::kNone;
  double queue_time_s = 0.0;  // arrival -> first scheduled (0 if never scheduled)
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  int64_t num_cached_tokens = 0;
  int32_t num_preemptions = 0;
};

}  // namespace tessera
