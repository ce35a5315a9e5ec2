#include "scheduler/routing_cost.h"

#include <algorithm>
#include <string>

namespace tessera {

StatusOr<RoutingLogic> ParseRoutingLogic(std::string_view name) {
  if (name == "load") return RoutingLogic::kLoad;
  if (name == "round-robin") return RoutingLogic::kRoundRobin;
  if (name == "kv-aware") return RoutingLogic::kKvAware;
  return InvalidArgument("--routing-logic " + std::string(name) + ": expected kv-aware, load or round-robin");
}

const char* RoutingLogicName(RoutingLogic logic) {
  switch (logic) {
    case RoutingLogic::kLoad: return "load";
    case RoutingLogic::kRoundRobin: return "round-robin";
    case RoutingLogic::kKvAware: return "kv-aware";
  }
  return "load";
}

int64_t KvAwareEvictTokens(const KvAwareCandidate& c, int64_t prompt_tokens, int64_t decode_work) {
  if (!c.pool_known || c.num_blocks <= 0 || c.block_size <= 0) return 0;
  const int64_t bs = c.block_size;
  const int64_t adds = (prompt_tokens - c.hit_tokens + decode_work + bs - 1) / bs;
  return std::max<int64_t>(0, c.held_blocks + adds - c.num_blocks) * bs;
}

double KvAwareCost(const KvAwareCandidate& c, int64_t prompt_tokens, int64_t decode_work) {
  return static_cast<double>(prompt_tokens - c.hit_tokens) + static_cast<double>(c.pending_tokens) +
         static_cast<double>(kRoutingSequenceTokens) * static_cast<double>(c.waiting) +
         static_cast<double>(kRoutingSequenceTokens) * c.kv_usage +
         static_cast<double>(KvAwareEvictTokens(c, prompt_tokens, decode_work));
}

}  // namespace tessera
