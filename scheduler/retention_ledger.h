// RetentionLedger: the retention budgets (docs/architecture.md, "Retention").
// Which prompt blocks each tenant holds retained, until when, and whether a
// new hold fits: per tenant (--retention-per-key-tokens) and in total
// (--retention-max-tokens). Counted in distinct full blocks per tenant, so a
// prefix marked again (or nested inside a longer marked prefix) is counted
// once and only has its time extended.
//
// Not thread-safe: owned by the Scheduler on the engine-loop thread. Memory:
// one map entry and one heap entry per held block (bounded by the budget);
// Expire is O(log n) per ended hold.
#pragma once

#include <cstdint>
#include <queue>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "scheduler/block_hash.h"

namespace tessera {

struct RetentionOptions {
  // Tokens one tenant may hold retained; -1: as many as max_tokens.
  int64_t per_key_tokens = -1;
  // Tokens all tenants together may hold; 0: retention off (every marked
  // request is refused); -1: half the device pool's tokens (Scheduler::Create
  // resolves it), so held blocks never starve running requests without a tier.
  int64_t max_tokens = 0;
};

class RetentionLedger {
 public:
  RetentionLedger(RetentionOptions options, int32_t block_size);

  // Admits a hold of `hashes` (a request's retained full blocks) for `tenant`,
  // block i until `until_ns[i]` (a block already held keeps the later time), or refuses it without changing anything:
  // INVALID_ARGUMENT when it could never fit a budget (400), RESOURCE_EXHAUSTED
  // when it does not fit now, beside the holds still running (429). Both
  // messages start with `field` quoted (the API error names it). Holds that
  // ended by `now_ns` are dropped first.
  Status Admit(const std::string& tenant, std::span<const BlockHash> hashes, std::span<const int64_t> until_ns,
               int64_t now_ns,
               const std::string& field);
  // Drops the holds that ended by `now_ns`.
  void Expire(int64_t now_ns);

  int64_t tenant_tokens(const std::string& tenant) const;
  int64_t total_tokens() const { return total_blocks_ * block_size_; }
  const RetentionOptions& options() const { return options_; }

 private:
  struct Tenant {
    std::unordered_map<BlockHash, int64_t, BlockHashHasher> until;  // hash -> end of its hold
  };
  struct Ending {
    int64_t until_ns;
    std::string tenant;
    BlockHash hash;
    bool operator>(const Ending& o) const { return until_ns > o.until_ns; }
  };
  int64_t PerKeyTokens() const { return options_.per_key_tokens < 0 ? options_.max_tokens : options_.per_key_tokens; }

  RetentionOptions options_;
  int32_t block_size_;
  std::unordered_map<std::string, Tenant> tenants_;
  int64_t total_blocks_ = 0;
  // Ends of holds, earliest first; an entry whose time was extended since is stale (skipped).
  std::priority_queue<Ending, std::vector<Ending>, std::greater<Ending>> endings_;
};

}  // namespace tessera
