// CacheWaterfall: the per-request account of a prompt's tokens — where each
// cached one came from and why each other one was computed
// (docs/architecture.md, "Cache waterfall"). Plain data, filled by the
// scheduler on a sequence's first admission from what the prefix cache and
// the KV connectors know; carried out to the server, which alone decides how
// each protocol spells it. Invariant: cached_total() + computed_total() is the
// prompt's token count, and cached_total() is the request's cached_tokens.
//
// RecentBlockHashes: a bounded, insertion-ordered set of block hashes (the
// prefix cache's recently evicted blocks, a tier's not yet written ones).
// O(1) per call; forgets the oldest insertion past its capacity. Not
// thread-safe: its owner guards it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "scheduler/block_hash.h"

namespace tessera {

// Where cached prompt tokens came from. Names (CacheSourceName) are API and
// metric label values.
enum class CacheSource : uint8_t {
  kPool,   // "pool": the device pool's prefix cache, computed here earlier
  kHost,   // "host": loaded from the host-DRAM tier
  kDisk,   // "disk": loaded from the disk tier
  kRedis,  // "redis": loaded from the shared Redis/Valkey tier
  kPeer,   // "peer": pulled from another instance (PD transfer, peer fetch)
};
inline constexpr size_t kNumCacheSources = 5;

// Why prompt tokens were computed. Names (ComputeReasonName) are API and
// metric label values.
enum class ComputeReason : uint8_t {
  kNoPrefix,        // "no_prefix": no record of the block here (never seen, or forgotten)
  kEvicted,         // "evicted": cached here recently, evicted, found in no tier
  kNotWritten,      // "not_written": a tier's write-through of it was skipped or is still queued
  kRoutedElsewhere, // "routed_elsewhere": the router's index says another instance holds it (router only)
  kTail,            // "tail": never cacheable — tokens past the last full block, and the last
                    // full block itself when all before the final token was cached (its logits
                    // give the first output token)
};
inline constexpr size_t kNumComputeReasons = 5;

std::string_view CacheSourceName(CacheSource source);
std::string_view ComputeReasonName(ComputeReason reason);
// "host" / "disk" / "redis" (a tier's name) → its source; nullopt for others.
std::optional<CacheSource> CacheSourceOfTier(std::string_view tier_name);

struct CacheWaterfall {
  std::array<int64_t, kNumCacheSources> cached{};
  std::array<int64_t, kNumComputeReasons> computed{};

  int64_t& operator[](CacheSource s) { return cached[static_cast<size_t>(s)]; }
  int64_t& operator[](ComputeReason r) { return computed[static_cast<size_t>(r)]; }
  int64_t cached_total() const;
  int64_t computed_total() const;
  bool empty() const { return cached_total() + computed_total() == 0; }
  CacheWaterfall& operator+=(const CacheWaterfall& other);
  bool operator==(const CacheWaterfall&) const = default;
};

class RecentBlockHashes {
 public:
  explicit RecentBlockHashes(size_t capacity) : capacity_(capacity) {}
  void Insert(const BlockHash& hash);
  void Erase(const BlockHash& hash) { set_.erase(hash); }
  bool Contains(const BlockHash& hash) const { return set_.count(hash) != 0; }
  size_t size() const { return set_.size(); }
  void Clear();

 private:
  size_t capacity_;
  // Insertion order, so set_.size() <= order_.size() <= capacity_. Popping the
  // oldest entry forgets its hash even if it was erased and inserted again
  // since: an early forget, never a false member.
  std::deque<BlockHash> order_;
  std::unordered_set<BlockHash, BlockHashHasher> set_;
};

}  // namespace tessera
