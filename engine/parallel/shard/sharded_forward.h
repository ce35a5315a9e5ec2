// ShardedForward: one step of a parallel model on one rank (then
// Model::FinishParallelStep: expert load, EPLB). Every rank of the
// group calls it with the same batch (rank 0's plan, broadcast).
//   tensor parallel (with or without EP): every rank runs the whole batch on its
//     heads/columns; logits are all-gathered inside Model::Forward.
//   data-parallel attention + EP: rank r runs sequences
//     [SliceBegin(num_seqs), +SliceCount) of the batch (a rank with none still
//     takes part in each MoE layer's all-to-alls), and rank 0 gathers every
//     rank's logits rows back into the batch's order. Each rank's KV pool has
//     the plan's block ids; a rank writes only its own sequences' blocks.
// On rank 0 `logits` is [logits_indices.size(), vocab]; other ranks get the
// same under TP and nothing under data-parallel attention.
#pragma once

#include <vector>

#include "engine/forward_batch.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

namespace tessera::parallel {

Status ShardedForward(Model& model, const ForwardBatch& batch, KvCache* cache, std::vector<float>* logits);

// The part of `batch` holding sequences [seq_begin, seq_begin + seq_count),
// renumbered; `rows` receives, for each of its logits rows, the index into
// batch.logits_indices it came from. (Exposed for tests.)
ForwardBatch SubBatch(const ForwardBatch& batch, int64_t seq_begin, int64_t seq_count, std::vector<int64_t>* rows);

}  // namespace tessera::parallel
