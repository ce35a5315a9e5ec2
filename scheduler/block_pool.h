// BlockPool: the KV cache's fixed set of block ids with reference counts, an
// LRU free queue, and the hash -> block map of the prefix cache. Holds no KV
// memory (engine/kv_cache.h does); ids index into it.
//
// A block with ref_count 0 is free. A free block that still carries a hash
// (it held a full, cached prefix block) stays findable by Lookup until
// Allocate evicts it, least recently freed first. Every operation is O(1)
// (Allocate is O(n) in blocks returned) except where noted. Not thread-safe:
// the engine-loop thread owns it through KvCacheManager.
//
// Retention (docs/architecture.md, "Retention"): a cached block can be held
// until a time (Retain). A free held block waits in a second queue that
// Allocate takes from only when the ordinary queue is empty, and only blocks
// a lower tier already holds pinned until the same time (RetainedBlockDemoter
// says so); a held block no tier holds is never evicted: it is not counted
// as free, so admission waits. Past its time it is an ordinary cached block.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "scheduler/block_hash.h"
#include "scheduler/kv_cache_events.h"

namespace tessera {

using BlockId = int32_t;

// Where a retained block goes when the pool needs its slot: a lower tier
// that keeps it, pinned, until its retention ends (runtime's TierConnector).
// Called on the engine-loop thread from BlockPool::EnsureFree; must be cheap
// (no I/O: an index lookup).
class RetainedBlockDemoter {
 public:
  virtual ~RetainedBlockDemoter() = default;
  // True when a lower tier holds `hash`'s bytes and pins them until at least
  // `until_ns` (the pool's clock), so the pool may drop its copy.
  virtual bool HoldUntil(const BlockHash& hash, int64_t until_ns) = 0;
};

class BlockPool {
 public:
  // Blocks 0..num_blocks-1, all free; the first allocations get 0, 1, 2, ...
  BlockPool(int32_t num_blocks, bool enable_caching);

  int32_t num_blocks() const { return num_blocks_; }
  // Blocks Allocate can hand out now: ref_count 0 and not held by a
  // retention no lower tier has taken over.
  int32_t num_free_blocks() const { return num_free_ + num_demoted_free_; }
  // Fraction of blocks referenced by some sequence, in [0, 1].
  double Usage() const { return 1.0 - static_cast<double>(num_free_ + num_retained_free_) / num_blocks_; }

  // Whether `n` blocks can be allocated, asking the demoter to take over free
  // retained blocks (least recently used first) while the ordinary queue is
  // short. O(retained free blocks) when it is short, else O(1).
  bool EnsureFree(int32_t n);

  // Takes `n` blocks from the LRU end of the free queue, then from the free
  // retained blocks a lower tier holds, evicting their cached hashes; each
  // returns with ref_count 1. Requires n <= num_free_blocks().
  std::vector<BlockId> Allocate(int32_t n);

  // Holds cached block `block` until `until_ns` (a later time extends the
  // hold; an earlier one changes nothing). Only cached blocks can be held.
  void Retain(BlockId block, int64_t until_ns);
  // Advances the pool's clock to `now_ns`: free blocks whose hold ended
  // become ordinary cached blocks, next to be evicted. Cheap unless some hold ended.
  void ExpireRetention(int64_t now_ns);
  void set_demoter(RetainedBlockDemoter* demoter) { demoter_ = demoter; }
  int64_t retained_until(BlockId block) const { return blocks_[block].retain_until; }
  // Blocks under a hold (in use or free); one that expired while in use counts until released.
  int64_t num_retained_blocks() const { return num_retained_; }

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
  // Free retained blocks, least recently used first. For tests.
  std::vector<BlockId> RetainedQueue() const;

 private:
  struct Meta {
    int32_t ref_count = 0;
    bool cached = false;
    bool in_free_queue = false;  // in either queue
    bool demoted = false;        // held, and a lower tier holds it as long
    int64_t retain_until = 0;    // 0: not held
    BlockHash hash;
    // Intrusive doubly-linked queues; index num_blocks_ is the ordinary free
    // queue's sentinel, num_blocks_ + 1 the retained queue's.
    int32_t prev = -1;
    int32_t next = -1;
  };
  int32_t Sentinel(bool retained) const { return retained ? num_blocks_ + 1 : num_blocks_; }
  void PushBack(BlockId b, bool retained);
  void Unlink(BlockId b);
  void Evict(BlockId b);
  void ClearRetention(BlockId b);

  int32_t num_blocks_;
  bool caching_;
  int32_t num_free_ = 0;           // in the ordinary free queue
  int32_t num_retained_free_ = 0;  // in the retained queue
  int32_t num_demoted_free_ = 0;   // of those, demoted (allocatable)
  int64_t num_retained_ = 0;
  int64_t now_ns_ = 0;
  int64_t next_expiry_ = 0;        // no free hold ends before this (0: unknown)
  RetainedBlockDemoter* demoter_ = nullptr;
  int64_t num_evictions_ = 0;
  std::vector<Meta> blocks_;  // num_blocks_ + 2 (the sentinels last)
  std::unordered_map<BlockHash, BlockId, BlockHashHasher> by_hash_;
  KvCacheEventSink* sink_ = nullptr;
};

}  // namespace tessera
