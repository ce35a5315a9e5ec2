// MakeForwardBatch: flattens a SchedulerOutput into the engine's ForwardBatch
// (engine/forward_batch.h, plain data): tokens of all scheduled sequences in
// plan order, their positions, slot_mapping = block * block_size + offset from
// each block table, tables padded with -1, and the logits rows. Copy ops are
// not part of the batch: the engine performs plan.copies first. O(tokens +
// seqs x max table length). Pure function; any thread.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/forward_batch.h"
#include "scheduler/scheduler_output.h"

namespace tessera {

// INTERNAL if a scheduled position is not covered by its block table (a
// scheduler bug); INVALID_ARGUMENT for an empty plan.
StatusOr<ForwardBatch> MakeForwardBatch(const SchedulerOutput& plan, int32_t block_size);

}  // namespace tessera
