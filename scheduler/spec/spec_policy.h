// How many tokens each sequence speculates in a step. Speculation pays only
// while decode is bandwidth-bound: verifying 1 + k tokens costs about one
// plain step only while the step's rows stay few, so k shrinks as the batch
// grows, and is 0 past disable_by_batch_size. Per sequence it is also capped
// by the tokens it may still emit and by the KV slots the scheduler can
// reserve (Scheduler::ReserveDraftSlots).
#pragma once

#include <cstdint>

#include "scheduler/spec/spec_config.h"

namespace tessera {

// Drafts per speculating sequence when `num_decoding` sequences decode:
// min(num_speculative_tokens, max_verify_tokens / num_decoding - 1), >= 0.
int32_t SpeculativeTokensForBatch(const SpeculativeConfig& config, int64_t num_decoding);

}  // namespace tessera
