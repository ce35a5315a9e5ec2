// The router's choice of instance as pure arithmetic over what it knows of
// each candidate (docs/architecture.md, "Router" and "Twin"). The router
// (server/router/kv_router.cc, instance_registry.cc) and the twin's cluster
// (runtime/sim/cluster.cc) both call these, so the twin routes with the
// router's own formulas, not a copy. No state, no I/O; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace tessera {

// --routing-logic: how the router picks the decode (or unified) instance.
enum class RoutingLogic { kLoad, kRoundRobin, kKvAware };
// "load" | "round-robin" | "kv-aware"; INVALID_ARGUMENT naming the flag otherwise.
StatusOr<RoutingLogic> ParseRoutingLogic(std::string_view name);
const char* RoutingLogicName(RoutingLogic logic);

// Tokens of work one queued (or waiting) sequence counts for, and the decode
// work of a request whose max_tokens the router does not know.
inline constexpr int64_t kRoutingSequenceTokens = 256;

// `load`: outstanding tokens the router sent the instance + 256 per sequence
// it reported queued (running + waiting). Least wins; the first on ties.
inline int64_t LoadScore(int64_t outstanding_tokens, int64_t queue_depth) {
  return outstanding_tokens + kRoutingSequenceTokens * queue_depth;
}

// The decode work a request adds: its max_tokens, or 256 when unknown (< 0).
inline int64_t RoutingDecodeWork(int64_t max_tokens) {
  return max_tokens >= 0 ? max_tokens : kRoutingSequenceTokens;
}

// Leading prompt blocks an instance can reuse: never the block of the last
// prompt token (the instance computes it itself for the first output token).
inline int64_t UsableHitBlocks(int64_t prompt_tokens, int64_t block_size) {
  return prompt_tokens > 0 && block_size > 0 ? (prompt_tokens - 1) / block_size : 0;
}

// One `kv-aware` candidate, as the router sees it at decision time.
struct KvAwareCandidate {
  int64_t hit_tokens = 0;      // prompt tokens it holds (UsableHitBlocks-capped, times the block size)
  int64_t pending_tokens = 0;  // work the router sent it and not yet finished
  int64_t waiting = 0;         // waiting sequences it reported
  double kv_usage = 0;         // its KV pool's usage, 0..1
  // The eviction term: only when the pool's size and the blocks it holds are known.
  bool pool_known = false;
  int64_t held_blocks = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 16;
};

// Tokens of cached blocks the request would push out: the blocks it adds
// (prompt beyond the hit, plus its decode work) beyond the pool's free room.
int64_t KvAwareEvictTokens(const KvAwareCandidate& c, int64_t prompt_tokens, int64_t decode_work);

// The candidate's cost in tokens of work: prompt tokens to prefill + pending
// + 256 x waiting + 256 x KV usage + evicted tokens.
double KvAwareCost(const KvAwareCandidate& c, int64_t prompt_tokens, int64_t decode_work);

// Whether a candidate of (cost, hit) beats the best so far: lower cost, then
// the larger hit.
inline bool KvAwareBetter(double cost, int64_t hit, double best_cost, int64_t best_hit) {
  return cost < best_cost || (cost == best_cost && hit > best_hit);
}

}  // namespace tessera
