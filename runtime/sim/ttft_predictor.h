// A request's time to first token, predicted at its arrival from the queue as
// it stands and the twin's linear cost model (docs/architecture.md, "Twin"):
// what SLO-aware admission (server/serving/ttft_slo.h) decides on.
//
// The model of the queue: every prefill token queued ahead is computed before
// the request's own (first come, first served), in steps of at most
// max_num_batched_tokens that also carry the running decodes (each takes one
// token of the budget, as the scheduler schedules running sequences first);
// the decode set is held fixed at its size now, each decode's context growing
// by one per step. The request's first token comes with the step that computes
// its last prompt token. What this leaves out, and which way it errs:
// decodes that finish meanwhile (over-estimates), requests ahead joining the
// decodes once prefilled (under-estimates), speculative drafts, and prefix
// cache hits unless the caller subtracts them (over-estimates).
//
// Cost: O(1) — a linear model's time summed over K steps is its time on the
// summed shape plus (K - 1) more step bases, so no step is enumerated. Pure
// functions; thread-safe.
#pragma once

#include <cstdint>

#include "runtime/sim/cost_model.h"

namespace tessera::sim {

// The work ahead of an arriving request, as the serving loop publishes it.
struct PrefillQueue {
  int64_t prefill_tokens = 0;     // prompt tokens queued and not yet computed
  int64_t prefill_attention = 0;  // their attended positions (PrefillAttention summed)
  int64_t num_decodes = 0;        // running decode sequences
  int64_t decode_context = 0;     // their context lengths, summed
};

// Sum over the tokens at positions [start, end) of the positions each attends
// to (itself and before), as StepShape::prefill_attention counts them. Any
// chunking of the range sums to the same number, which is what lets a queue be
// summarised by two counters.
int64_t PrefillAttention(int64_t start, int64_t end);

struct TtftPrediction {
  double ttft_s = 0;   // until the request's first token
  double drain_s = 0;  // until the prefill queued ahead of it is computed (0: none)
  int64_t steps = 0;   // steps until its first token
};

// `prompt_tokens` tokens to compute from position `cached_tokens` (its prefix
// cache hit; 0 when unknown: then the prediction is an upper bound in that
// respect), behind `ahead`. max_num_batched_tokens >= 1.
TtftPrediction PredictTtft(const LinearCostModel& model, const PrefillQueue& ahead, int64_t prompt_tokens,
                           int64_t cached_tokens, int64_t max_num_batched_tokens);

}  // namespace tessera::sim
