// ExpertLoad: how many tokens each expert of each MoE layer has received,
// plain host data the engine loop hands to metrics and benchmarks.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {

// Tokens routed to each expert (one per (token, slot) pair) since the model
// loaded: counts[i * num_experts + e] for MoE layer layers[i]. Empty for dense models.
struct ExpertLoad {
  int64_t num_experts = 0;
  std::vector<int64_t> layers;
  std::vector<int64_t> counts;
  // Expert parallelism: the same pairs by the rank that computed them,
  // rank_counts[(i * num_experts + e) * world_size + r]; EPLB rebalances done.
  int world_size = 0;
  std::vector<int64_t> rank_counts;
  int64_t rebalances = 0;
  bool empty() const { return layers.empty(); }
  // Over all layers: the most loaded expert's share of the mean load (1 = balanced).
  double MaxOverMean() const {
    if (counts.empty()) return 0.0;
    int64_t total = 0, peak = 0;
    for (int64_t c : counts) {
      total += c;
      peak = c > peak ? c : peak;
    }
    return total == 0 ? 0.0 : static_cast<double>(peak) * static_cast<double>(counts.size()) / total;
  }
};

}  // namespace tessera
