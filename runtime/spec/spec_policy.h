// How many tokens each sequence speculates in a step. Speculation pays only
// while decode is bandwidth-bound: verifying 1 + k tokens costs about one
// plain step only while the step's rows stay few, so k shrinks as the batch
// grows, and is 0 past disable_by_batch_size. Per sequence it is also capped
// by the tokens it may still emit and by the KV slots the scheduler can
// reserve (Scheduler::ReserveDraftSlots).
#pragma once

#include <cstdint>

#include "runtime/spec/spec_config.h"

namespace tessera {

// Drafts per speculating sequence when `num_decoding` sequences decode:
// min(num_speculative_tokens, max_verify_tokens / num_decoding - 1), >= 0.
int32_t SpeculativeTokensForBatch(const SpeculativeConfig& config, int64_t num_decoding);

inline constexpr int32_t kAcceptanceProbeSteps = 16;

// One sequence's acceptance record: exponentially decayed counts of accepted
// drafts and of rejections (a verify that stopped before its last draft).
// The per-token acceptance rate is their truncated-geometric estimate.
// Not thread-safe; owned by the engine loop.
class AcceptanceEstimate {
 public:
  void Record(int32_t num_accepted, int32_t num_drafted);
  // accepted / (accepted + rejections). One accepted pseudo-draft, decayed like
  // the rest, makes it start at 1 (optimistic): a new sequence speculates fully
  // until its drafts miss.
  double Rate() const { return accepted_ / (accepted_ + rejected_); }
  // Drafts for the next step under the floor, at most k_max; 0 between probes.
  int32_t Tokens(int32_t k_max, double min_draft_acceptance);

 private:
  double accepted_ = 1, rejected_ = 0;
  int32_t steps_without_drafts_ = 0;
};

}  // namespace tessera
