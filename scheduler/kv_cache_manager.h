// KvCacheManager: which KV blocks each sequence holds. Owns the BlockPool;
// allocates slots for the tokens a step will compute (plus speculative
// lookahead), finds cached prefixes on admission, registers newly computed full
// blocks in the prefix cache, forks sequences (n > 1) with copy-on-write of a
// shared partial block, and frees. Plain ids only — never touches tensors.
// Not thread-safe: owned by the Scheduler on the engine-loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "scheduler/block_hash.h"
#include "scheduler/block_pool.h"
#include "scheduler/cache_waterfall.h"
#include "scheduler/kv_cache_events.h"

namespace tessera {

using SeqId = int64_t;

struct KvCacheOptions {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  // How full blocks are named in the prefix cache (and wherever they leave
  // the process): --prefix-caching-hash-algo and the chain's root.
  BlockHashScheme hash_scheme = BlockHashScheme();
  // Receives the prefix cache's stores, evictions and resets (KV events);
  // null: none. Shared so the publisher outlives the manager.
  std::shared_ptr<KvCacheEventSink> event_sink = nullptr;
};

// Copy block `src` into `dst` (all layers, K and V) before the step's forward
// pass: a sequence is about to write into a partial block it shares.
struct CopyOp {
  BlockId src = -1;
  BlockId dst = -1;
  bool operator==(const CopyOp&) const = default;
};

// A cached prefix found for a sequence: its first blocks, already computed.
struct PrefixHit {
  std::vector<BlockId> blocks;
  int64_t num_tokens = 0;          // blocks.size() * block_size
  int64_t num_queried_tokens = 0;  // the sequence's length when looked up (caching on);
                                   // 0: not counted in the prefix stats (a tier or KV load)
};

struct KvCacheStats {
  int64_t prefix_queries = 0;  // tokens looked up on admission (caching on)
  int64_t prefix_hits = 0;     // of those, tokens found cached
  int64_t cow_copies = 0;
  int64_t evictions = 0;       // cached free blocks reused for other content
};

// Bytes of K and V for one token across all layers.
inline int64_t KvBytesPerToken(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim,
                               int64_t bytes_per_element) {
  return 2 * num_layers * num_kv_heads * head_dim * bytes_per_element;
}

// Blocks that fit in `budget_bytes`. INVALID_ARGUMENT when not even one does.
StatusOr<int32_t> NumBlocksForBudget(int64_t budget_bytes, int64_t kv_bytes_per_token, int32_t block_size);

class KvCacheManager {
 public:
  static StatusOr<std::unique_ptr<KvCacheManager>> Create(const KvCacheOptions& options);

  int32_t block_size() const { return block_size_; }
  const BlockHashScheme& hash_scheme() const { return hash_scheme_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  int32_t num_free_blocks() const { return pool_.num_free_blocks(); }
  double Usage() const { return pool_.Usage(); }
  bool caching_enabled() const { return pool_.caching_enabled(); }
  int64_t BlocksForTokens(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Longest run of cached blocks matching `hashes` (a sequence's full-block
  // chain), capped so at least one of its `num_tokens` tokens is left to
  // compute (the step needs its logits). Takes no references; valid until the
  // next mutating call. Empty when caching is off.
  PrefixHit FindCachedPrefix(std::span<const BlockHash> hashes, int64_t num_tokens) const;

  // Gives `seq` slots for positions [0, num_computed + num_new + lookahead).
  // On a sequence's first allocation `hit` (possibly empty) supplies its
  // computed prefix (num_computed must equal hit->num_tokens) and is counted
  // in the hit-rate stats; pass nullptr afterwards. Blocks in the write range
  // [num_computed, ...) that are shared are replaced by fresh ones, with a
  // CopyOp appended to `copies` where the block already holds computed
  // tokens. Returns false and changes nothing when blocks are short.
  bool AllocateSlots(SeqId seq, int64_t num_computed, int64_t num_new, int64_t lookahead,
                     const PrefixHit* hit, std::vector<CopyOp>* copies);

  // Registers `seq`'s full blocks within its first `num_computed` tokens in
  // the prefix cache; `hashes` must cover them. Call after the step computed them.
  // `token_ids` (the sequence's tokens, covering them) feed the event sink's
  // BlockStored; with an empty span no store is reported.
  // `newly_cached` (optional) receives each block registered now with its hash.
  void CacheComputedBlocks(SeqId seq, std::span<const BlockHash> hashes, int64_t num_computed,
                           std::span<const int32_t> token_ids = {},
                           std::vector<std::pair<BlockId, BlockHash>>* newly_cached = nullptr);

  // Holds `seq`'s first `num_blocks` blocks (those already cached) until
  // `until_ns` (BlockPool::Retain; docs/architecture.md, "Retention").
  void RetainPrefix(SeqId seq, int64_t num_blocks, int64_t until_ns);

  // `child` (new) shares `parent`'s blocks covering its first `num_computed`
  // tokens; a later write into the shared partial block copies it first.
  void Fork(SeqId parent, SeqId child, int64_t num_computed);

  // Releases every block of `seq`, deepest first, so the blocks least likely
  // to be shared again are evicted first. No-op for an unknown seq.
  void Free(SeqId seq);

  bool Holds(SeqId seq) const { return seqs_.count(seq) != 0; }
  // `seq`'s block table; empty for an unknown seq.
  std::span<const BlockId> blocks(SeqId seq) const;

  // Whether `hash` was evicted from (or reset out of) the prefix cache
  // recently: the last max(1024, min(2 * num_blocks, 131072)) evictions are
  // remembered (a ComputeReason::kEvicted). A hash cached again stays listed;
  // callers ask only about blocks the pool lacks.
  bool RecentlyEvicted(const BlockHash& hash) const { return tap_.evicted.Contains(hash); }

  KvCacheStats stats() const;
  const BlockPool& pool() const { return pool_; }
  BlockPool& mutable_pool() { return pool_; }

 private:
  struct SeqBlocks {
    std::vector<BlockId> blocks;
    int64_t num_cached = 0;  // leading blocks already registered or known cached
  };
  // The pool's sink: notes evicted hashes, then forwards to the caller's sink.
  struct EvictionTap final : KvCacheEventSink {
    explicit EvictionTap(size_t capacity) : evicted(capacity) {}
    void OnBlocksStored(std::optional<BlockHash> parent, std::span<const BlockHash> hashes,
                        std::span<const int32_t> token_ids, int32_t block_size) override;
    void OnBlocksRemoved(std::span<const BlockHash> hashes) override;
    void OnAllBlocksCleared() override;
    RecentBlockHashes evicted;
    KvCacheEventSink* next = nullptr;
  };
  explicit KvCacheManager(const KvCacheOptions& options);

  int32_t block_size_;
  BlockHashScheme hash_scheme_;
  BlockPool pool_;
  std::shared_ptr<KvCacheEventSink> sink_;
  EvictionTap tap_;
  std::unordered_map<SeqId, SeqBlocks> seqs_;
  KvCacheStats stats_;
};

}  // namespace tessera
