// ShardPlan: which part of a model one rank holds (docs/architecture.md, "Parallelism"), as plain data
// computed from the ModelConfig and the parallel layout. No tensors here.
//
// Layouts (world = number of ranks in the group):
//   tensor parallel (TP)      q heads, KV heads, FFN columns, expert FFN columns
//                             and the vocabulary split contiguously over ranks;
//                             row-parallel outputs summed with an all-reduce.
//   TP + expert parallel      as TP, but each MoE layer's routed experts are
//                             placed on ranks (contiguous ranges) and tokens move
//                             to them with all-to-all; expert matrices whole.
//   data-parallel attention   attention, dense FFNs, shared experts, embedding and
//     + expert parallel       lm_head replicated; each rank runs its share of the
//                             batch's sequences; experts placed as above. Every
//                             op a token sees is the one-rank op, so logits are
//                             bitwise those of one rank.
// KV heads: split when world divides them; replicated (each rank holds the one KV
// head its q heads read) when there are fewer KV heads than ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/model_config.h"
#include "engine/parallel/shard/eplb.h"
#include "engine/weight_specs.h"

namespace tessera::parallel {

struct ShardOptions {
  int world_size = 1;
  int rank = 0;
  bool expert_parallel = false;          // MoE: place experts on ranks (needs an MoE model)
  bool data_parallel_attention = false;  // replicate the dense parts, split sequences (needs expert_parallel)
  EplbOptions eplb;                      // replicas and rebalancing (needs expert_parallel)
};

// A contiguous range [begin, begin + count).
struct Range {
  int64_t begin = 0;
  int64_t count = 0;
  int64_t end() const { return begin + count; }
  bool Contains(int64_t i) const { return i >= begin && i < end(); }
};

struct ShardPlan {
  ShardOptions options;
  Range q_heads, kv_heads;  // head indices
  Range inter;              // dense FFN columns (intermediate_size)
  Range expert_inter;       // routed experts' columns (TP without EP; else the whole width)
  Range shared_inter;       // shared expert columns
  Range vocab;              // embedding / lm_head rows
  Range experts;            // routed experts held (all without EP; unused with an expert map)
  // The logical expert of each of this rank's physical expert slots at load:
  // experts.begin.. without a map; ExpertMap::Initial's slots with EPLB. Every
  // MoE layer starts with this placement.
  std::vector<int64_t> slot_experts;
  int64_t vocab_stride = 0; // largest vocab slice of any rank (all-gather block)

  bool tensor_parallel() const { return options.world_size > 1 && !options.data_parallel_attention; }
  bool expert_parallel() const { return options.expert_parallel && options.world_size > 1; }
  bool expert_map() const { return expert_parallel() && options.eplb.uses_map(); }
  // Rank holding routed expert e (contiguous placement, no expert map).
  int OwnerOfExpert(int64_t e, int64_t num_experts) const;
  // Whether this rank loads expert e's weights at start.
  bool HoldsExpert(int64_t e) const;
  // The config this rank computes with: local head counts and FFN widths
  // (vocab_size stays global: logits are gathered to the full vocabulary).
  ModelConfig LocalConfig(const ModelConfig& global) const;
};

// Validates the layout against the model (head counts divisible, MoE for EP,
// quantized column slices on block boundaries are checked at load).
StatusOr<ShardPlan> MakeShardPlan(const ModelConfig& config, const ShardOptions& options);

// How a rank reads one checkpoint tensor of global shape spec.shape.
struct TensorSlice {
  enum class Kind { kWhole, kRows, kCols, kSkip } kind = Kind::kWhole;
  Range range;             // rows (kRows) or columns (kCols); vectors: elements (kRows)
  bool zero_row = false;   // append one zero row (vocab-parallel embedding: ids of other ranks)
};
TensorSlice SliceFor(const ShardPlan& plan, const ModelConfig& config, const WeightSpec& spec);

}  // namespace tessera::parallel
