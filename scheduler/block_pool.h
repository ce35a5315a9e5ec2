// BlockPool: the KV cache's fixed set of block ids with reference counts, an
// LRU free queue, and the hash -> block map of the prefix cache. Holds no KV
// memory (engine/kv_cache.h does); ids index into it.
//
// A block with ref_count 0 is free. A free block that still carries a hash
// (it held a full, cached prefix block) stays findable by Lookup until
// Allocate evicts it, least recently freed first. Every operation is O(1)
// (Allocate is O(n) in blocks returned). Not thread-safe: the engine-loop
// thread owns it through KvCacheManager.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "scheduler/block_hash.h"
#include "scheduler/kv_cache_events.h"

namespace tessera {

using BlockId = int32_t;

class BlockPool {
 public:
  // Blocks 0..num_blocks-1, all free; the first allocations get 0, 1, 2, ...
  BlockPool(int32_t num_blocks, bool enable_caching);

  int32_t num_blocks() const { return num_blocks_; }
  // Blocks with ref_count 0, cached or not: what Allocate can hand out now.
  int32_t num_free_blocks() const { return num_free_; }
  // Fraction of blocks referenced by some sequence, in [0, 1].
  double Usage() const { return 1.0 - static_cast<double>(num_free_) / num_blocks_; }

  // Takes `n` blocks from the LRU end of the free queue, evicting their cached
  // hashes; each returns with ref_count 1. Requires n <= num_free_blocks().
  std::vector<BlockId> Allocate(int32_t n);

  // The block caching `hash`, if any (free or in use). Takes no reference.
  std::optional<BlockId> Lookup(const BlockHash& hash) const;

  // Adds a reference; a free block leaves the free queue (a prefix-cache hit).
  void Touch(BlockId block);

  // Drops a reference; at 0 the block joins the most-recently-used end of the
  // free queue, keeping its hash so it can still be hit.
  void Release(BlockId block);

  // Registers a full in-use block under `hash`. No-op (false) when caching is
  // off, the block already has a hash, or another block holds this hash.
  bool Cache(BlockId block, const BlockHash& hash);

  // Forgets every cached hash of a free block (e.g. after weights change).
  // Reported as AllBlocksCleared when no cached block was in use, else as
  // BlockRemoved of the hashes dropped.
  void ResetPrefixCache();

  // Evictions and resets are reported here (stores by KvCacheManager, which
  // knows the tokens). Not owned; null: none. Must outlive the pool.
  void set_event_sink(KvCacheEventSink* sink) { sink_ = sink; }
  KvCacheEventSink* event_sink() const { return sink_; }

  int32_t ref_count(BlockId block) const { return blocks_[block].ref_count; }
  bool is_cached(BlockId block) const { return blocks_[block].cached; }
  bool caching_enabled() const { return caching_; }
  int64_t num_evictions() const { return num_evictions_; }
  int64_t num_cached_blocks() const { return static_cast<int64_t>(by_hash_.size()); }

  // Free blocks from next-to-allocate to last. O(num_free); for tests.
  std::vector<BlockId> FreeQueue() const;

 private:
  struct Meta {
    int32_t ref_count = 0;
    bool cached = false;
    bool in_free_queue = false;
    BlockHash hash;
    // Intrusive doubly-linked free queue; index num_blocks_ is the sentinel.
    int32_t prev = -1;
    int32_t next = -1;
  };
  void PushBack(BlockId b);
  void Unlink(BlockId b);
  void Evict(BlockId b);

  int32_t num_blocks_;
  bool caching_;
  int32_t num_free_ = 0;
  int64_t num_evictions_ = 0;
  std::vector<Meta> blocks_;  // num_blocks_ + 1 (sentinel last)
  std::unordered_map<BlockHash, BlockId, BlockHashHasher> by_hash_;
  KvCacheEventSink* sink_ = nullptr;
};

}  // namespace tessera
