// What sizes the scheduler from the model, shared by the engine loop and the
// twin (`tessera simulate`, runtime/sim/) so both admit and refuse the same
// requests: vocabulary, EOS ids and max_model_len from the model's config,
// then max_model_len capped at what the KV pool holds.
#pragma once

#include "engine/model_config.h"
#include "scheduler/scheduler.h"

namespace tessera {

// Fills so->limits.vocab_size (when 0) and so->eos_token_ids (when empty) from
// `mc`; max_model_len <= 0 becomes max_position_embeddings (4096 when unknown),
// a given one is capped at it. Returns whether max_model_len was automatic.
bool ApplyModelLimits(const ModelConfig& mc, SchedulerOptions* so);

// After so->kv.num_blocks is known: an automatic max_model_len longer than the
// pool becomes the pool's tokens (logged); a given one stays, with a warning
// (longer requests are refused at admission).
void CapModelLenAtKvCache(bool auto_len, SchedulerOptions* so);

}  // namespace tessera
