// KvPrefixIndex: the cluster-wide prefix index a KV-aware router keeps from
// the instances' KV events — which instance holds which chained block hash —
// and its one question: for a prompt's chained block hashes, how many leading
// blocks does each instance hold?
//
// Hashes are opaque keys (kv_event_codec.h HashKey), so the index serves vLLM
// instances as well as Tessera ones. A block counts when held in any medium
// (a null medium is "GPU", vLLM's primary pool); BlockRemoved drops it from the
// medium it names. Memory is bounded: past max_blocks_per_instance an
// instance's least recently stored blocks are forgotten (the index then
// under-counts, which only costs a router a missed hit).
//
// Thread-safe: a shared mutex; Apply/Clear/Remove exclusive, Match shared.
// Apply is O(events' hashes); Match is O(keys x holders of each key).
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "scheduler/block_hash.h"
#include "server/kv_events/kv_event_codec.h"

namespace tessera::kv_events {

struct KvPrefixIndexOptions {
  int64_t max_blocks_per_instance = int64_t{1} << 20;
};

struct InstanceMatch {
  std::string instance;
  int64_t matched_blocks = 0;   // leading blocks of the query this instance holds
  int64_t held_blocks = 0;      // all blocks the index knows it holds
  double last_event_age_s = 0;  // since its last batch (or registration): staleness
};

class KvPrefixIndex {
 public:
  explicit KvPrefixIndex(KvPrefixIndexOptions options = {});
  ~KvPrefixIndex();

  // Registers `instance` if new (with no blocks).
  void AddInstance(const std::string& instance);
  // Applies one batch from `instance` (registering it), in order.
  void Apply(const std::string& instance, const EventBatch& batch);
  // Forgets what `instance` holds but keeps it known (AllBlocksCleared, a gap).
  void ClearInstance(const std::string& instance);
  // Forgets `instance` entirely (it left the cluster or died).
  void RemoveInstance(const std::string& instance);

  // Every known instance, most matched blocks first (ties: instance name).
  std::vector<InstanceMatch> Match(std::span<const HashKey> keys) const;
  // The same for a Tessera chain (scheduler/block_hash.h ExtendBlockHashes).
  std::vector<InstanceMatch> Match(std::span<const BlockHash> hashes) const;

  int64_t num_entries() const;  // (instance, block) pairs held
  std::vector<std::string> instances() const;

 private:
  struct Instance;
  using Clock = std::chrono::steady_clock;
  Instance& Get(const std::string& instance);  // exclusive lock held
  void Store(uint32_t slot, Instance& inst, const HashKey& key, uint8_t medium_bit);
  void Drop(uint32_t slot, Instance& inst, const HashKey& key, uint8_t medium_bit);
  void ClearLocked(uint32_t slot, Instance& inst);
  uint8_t MediumBit(const std::optional<std::string>& medium);

  KvPrefixIndexOptions options_;
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, uint32_t> slot_of_;             // instance -> slot
  std::vector<std::unique_ptr<Instance>> slots_;                  // null: free slot
  std::unordered_map<HashKey, std::vector<uint32_t>> holders_;    // key -> slots holding it
  std::vector<std::string> mediums_;                              // bit i -> name (at most 8)
  int64_t num_entries_ = 0;
};

}  // namespace tessera::kv_events
