// Expert-parallel load balancing (EPLB), as plain data: the logical -> physical
// expert map with redundant replicas of hot experts, the least-loaded replica
// choice for a token, and a rebalanced map computed from measured per-expert
// load (replicate the experts with the highest load per replica, then pack the
// replicas onto ranks heaviest first, each to the least-loaded rank with a free
// slot that does not yet hold that expert, then improve by pairwise swaps).
//
// ModelShard dispatches with one map per MoE layer and installs new maps at a
// step boundary (model_shard.h); EplbOptions are vLLM's --enable-eplb,
// --eplb-config and --num-redundant-experts.
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::parallel {

// vLLM's EPLBConfig fields (--eplb-config JSON) and --enable-eplb.
struct EplbOptions {
  bool enabled = false;               // --enable-eplb: rebalance every step_interval steps
  int64_t num_redundant_experts = 0;  // extra physical slots per MoE layer (replicas of hot experts)
  int64_t window_size = 1000;         // steps of measured load a rebalance uses
  int64_t step_interval = 3000;       // steps between rebalances
  bool log_balancedness = false;      // log max/mean load per rank after every step
  // Whether dispatch goes through an ExpertMap (replicas or rebalancing).
  bool uses_map() const { return enabled || num_redundant_experts > 0; }
};

// Parses --eplb-config (a JSON object with any of window_size, step_interval,
// num_redundant_experts, log_balancedness) onto `base`; errors name the field.
// `sets_redundant` (optional): whether the JSON gave num_redundant_experts.
StatusOr<EplbOptions> ParseEplbConfig(const std::string& json_text, EplbOptions base,
                                      bool* sets_redundant = nullptr);

class ExpertMap {
 public:
  // num_experts + num_redundant physical slots, the same number on every rank.
  // Initial: slot i holds expert i, the redundant slots replicas of experts
  // 0, 1, ... in turn.
  static StatusOr<ExpertMap> Initial(int world_size, int64_t num_experts, int64_t num_redundant);
  // From per-expert load (tokens routed to each logical expert).
  static StatusOr<ExpertMap> Balanced(int world_size, int64_t num_experts, int64_t num_redundant,
                                      const std::vector<int64_t>& load);
  // From the logical expert of each physical slot (a broadcast map); checks it.
  static StatusOr<ExpertMap> FromLogical(int world_size, int64_t num_experts, std::vector<int64_t> logical);
  const std::vector<int64_t>& logical_slots() const { return logical_; }
  // Whether rank r holds expert e in one of its slots.
  bool RankHolds(int r, int64_t expert) const;

  int world_size() const { return world_; }
  int64_t num_experts() const { return static_cast<int64_t>(replicas_.size()); }
  int64_t num_slots() const { return static_cast<int64_t>(logical_.size()); }
  int64_t slots_per_rank() const { return num_slots() / world_; }
  int64_t logical(int64_t slot) const { return logical_[slot]; }
  int RankOfSlot(int64_t slot) const { return static_cast<int>(slot / slots_per_rank()); }
  const std::vector<int64_t>& replicas(int64_t expert) const { return replicas_[expert]; }

  // The replica of `expert` on the rank with the least work so far
  // (rank_pairs[r]: pairs already sent to rank r this step; ties: lower slot),
  // and counts the pair. Every replica computes the same output, so the choice
  // never changes a token's result.
  int64_t Choose(int64_t expert, std::vector<int64_t>* rank_pairs) const;

  // max / mean over ranks of the (token, expert) pairs each rank computes when
  // load[e] pairs of each expert arrive interleaved and each goes to the
  // replica Choose picks. 1 is perfect balance.
  double Imbalance(const std::vector<int64_t>& load) const;

 private:
  static StatusOr<ExpertMap> FromSlots(int world_size, std::vector<int64_t> logical, int64_t num_experts);
  int world_ = 1;
  std::vector<int64_t> logical_;                 // per physical slot
  std::vector<std::vector<int64_t>> replicas_;  // per logical expert: its slots, ascending
};

}  // namespace tessera::parallel
