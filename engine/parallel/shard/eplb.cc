#include "engine/parallel/shard/eplb.h"

#include <algorithm>
#include <numeric>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::parallel {
namespace {

Status CheckShape(int world, int64_t experts, int64_t redundant) {
  if (world < 1 || experts < 1 || redundant < 0) {
    return InvalidArgument("eplb: world size, experts and redundant experts must be positive");
  }
  if ((experts + redundant) % world != 0) {
    return InvalidArgument("eplb: " + std::to_string(experts) + " experts + " + std::to_string(redundant) +
                           " redundant do not fill " + std::to_string(world) + " ranks evenly");
  }
  if (experts + redundant < world) return InvalidArgument("eplb: fewer expert slots than ranks");
  return Status::Ok();
}

}  // namespace

StatusOr<EplbOptions> ParseEplbConfig(const std::string& text, EplbOptions o, bool* sets_redundant) {
  if (sets_redundant != nullptr) *sets_redundant = false;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("--eplb-config: not a JSON object: " + text);
  for (const auto& [key, v] : j.items()) {
    if (key == "log_balancedness") {
      if (!v.is_boolean()) return InvalidArgument("--eplb-config: 'log_balancedness' must be true or false");
      o.log_balancedness = v.get<bool>();
      continue;
    }
    int64_t* field = key == "window_size"             ? &o.window_size
                     : key == "step_interval"         ? &o.step_interval
                     : key == "num_redundant_experts" ? &o.num_redundant_experts
                                                      : nullptr;
    if (field == nullptr) {
      return InvalidArgument("--eplb-config: unknown field '" + key +
                             "' (supported: window_size, step_interval, num_redundant_experts, log_balancedness)");
    }
    const int64_t min = key == "num_redundant_experts" ? 0 : 1;
    if (!v.is_number_integer() || v.get<int64_t>() < min) {
      return InvalidArgument("--eplb-config: '" + key + "' must be an integer >= " + std::to_string(min) + ", got " +
                             v.dump());
    }
    *field = v.get<int64_t>();
    if (field == &o.num_redundant_experts && sets_redundant != nullptr) *sets_redundant = true;
  }
  return o;
}

StatusOr<ExpertMap> ExpertMap::FromLogical(int world, int64_t experts, std::vector<int64_t> logical) {
  RETURN_IF_ERROR(CheckShape(world, experts, static_cast<int64_t>(logical.size()) - experts));
  for (int64_t e : logical) {
    if (e < 0 || e >= experts) return InvalidArgument("eplb: slot names expert " + std::to_string(e));
  }
  return FromSlots(world, std::move(logical), experts);
}

bool ExpertMap::RankHolds(int r, int64_t expert) const {
  for (int64_t s : replicas_[expert]) {
    if (RankOfSlot(s) == r) return true;
  }
  return false;
}

StatusOr<ExpertMap> ExpertMap::FromSlots(int world, std::vector<int64_t> logical, int64_t experts) {
  ExpertMap m;
  m.world_ = world;
  m.logical_ = std::move(logical);
  m.replicas_.resize(static_cast<size_t>(experts));
  for (int64_t s = 0; s < m.num_slots(); ++s) m.replicas_[m.logical_[s]].push_back(s);
  for (int64_t e = 0; e < experts; ++e) {
    if (m.replicas_[e].empty()) return Internal("eplb: expert " + std::to_string(e) + " has no slot");
  }
  return m;
}

StatusOr<ExpertMap> ExpertMap::Initial(int world, int64_t experts, int64_t redundant) {
  RETURN_IF_ERROR(CheckShape(world, experts, redundant));
  std::vector<int64_t> logical(static_cast<size_t>(experts + redundant));
  for (int64_t s = 0; s < experts + redundant; ++s) logical[s] = s % experts;
  return FromSlots(world, std::move(logical), experts);
}

StatusOr<ExpertMap> ExpertMap::Balanced(int world, int64_t experts, int64_t redundant,
                                        const std::vector<int64_t>& load) {
  RETURN_IF_ERROR(CheckShape(world, experts, redundant));
  if (static_cast<int64_t>(load.size()) != experts) return InvalidArgument("eplb: one load per expert expected");
  // 1. Replicas: each extra one to the expert with the most load per replica.
  std::vector<int64_t> copies(static_cast<size_t>(experts), 1);
  auto per_replica = [&](int64_t e) { return static_cast<double>(load[e]) / static_cast<double>(copies[e]); };
  for (int64_t i = 0; i < redundant; ++i) {
    int64_t best = 0;
    for (int64_t e = 1; e < experts; ++e) {
      if (per_replica(e) > per_replica(best)) best = e;
    }
    ++copies[best];
  }
  // 2. Packing: heaviest replica first, to the least-loaded rank with a free
  // slot, preferring ranks that do not hold the expert yet.
  std::vector<int64_t> order;
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t c = 0; c < copies[e]; ++c) order.push_back(e);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return per_replica(a) > per_replica(b); });
  const int64_t cap = (experts + redundant) / world;
  std::vector<double> rank_load(static_cast<size_t>(world), 0.0);
  std::vector<std::vector<int64_t>> held(static_cast<size_t>(world));
  for (int64_t e : order) {
    int best = -1;
    bool best_fresh = false;
    for (int r = 0; r < world; ++r) {
      if (static_cast<int64_t>(held[r].size()) >= cap) continue;
      const bool fresh = std::find(held[r].begin(), held[r].end(), e) == held[r].end();
      if (best < 0 || (fresh && !best_fresh) || (fresh == best_fresh && rank_load[r] < rank_load[best])) {
        best = r;
        best_fresh = fresh;
      }
    }
    held[best].push_back(e);
    rank_load[best] += per_replica(e);
  }
  // 3. Swaps: while trading one replica of the heaviest rank for a lighter one
  // of another rank lowers the pair's maximum, take the best such trade.
  auto holds = [&](int r, int64_t e) { return std::find(held[r].begin(), held[r].end(), e) != held[r].end(); };
  for (int iter = 0; iter < 1000; ++iter) {
    const int top = static_cast<int>(std::max_element(rank_load.begin(), rank_load.end()) - rank_load.begin());
    double best_max = rank_load[top];
    int best_r = -1;
    size_t best_i = 0, best_j = 0;
    for (int r = 0; r < world; ++r) {
      if (r == top) continue;
      for (size_t i = 0; i < held[top].size(); ++i) {
        for (size_t j = 0; j < held[r].size(); ++j) {
          const int64_t a = held[top][i], b = held[r][j];
          const double d = per_replica(a) - per_replica(b);
          if (d <= 0 || a == b || holds(r, a) || holds(top, b)) continue;
          const double worst = std::max(rank_load[top] - d, rank_load[r] + d);
          if (worst < best_max - 1e-9) best_max = worst, best_r = r, best_i = i, best_j = j;
        }
      }
    }
    if (best_r < 0) break;
    const double d = per_replica(held[top][best_i]) - per_replica(held[best_r][best_j]);
    std::swap(held[top][best_i], held[best_r][best_j]);
    rank_load[top] -= d;
    rank_load[best_r] += d;
  }
  std::vector<int64_t> logical;
  for (auto& h : held) {
    std::sort(h.begin(), h.end());
    logical.insert(logical.end(), h.begin(), h.end());
  }
  return FromSlots(world, std::move(logical), experts);
}

int64_t ExpertMap::Choose(int64_t expert, std::vector<int64_t>* rank_pairs) const {
  const std::vector<int64_t>& r = replicas_[expert];
  int64_t best = r[0];
  for (int64_t s : r) {
    if ((*rank_pairs)[RankOfSlot(s)] < (*rank_pairs)[RankOfSlot(best)]) best = s;
  }
  ++(*rank_pairs)[RankOfSlot(best)];
  return best;
}

double ExpertMap::Imbalance(const std::vector<int64_t>& load) const {
  // Pairs of all experts interleaved, as tokens arrive, each sent by Choose.
  std::vector<int64_t> rank(static_cast<size_t>(world_), 0), left = load;
  for (bool any = true; any;) {
    any = false;
    for (int64_t e = 0; e < num_experts(); ++e) {
      if (left[e] <= 0) continue;
      --left[e];
      (void)Choose(e, &rank);
      any = true;
    }
  }
  const double mean = static_cast<double>(std::accumulate(rank.begin(), rank.end(), int64_t{0})) / world_;
  return mean == 0 ? 1.0 : static_cast<double>(*std::max_element(rank.begin(), rank.end())) / mean;
}

}  // namespace tessera::parallel
