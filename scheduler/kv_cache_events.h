// KvCacheEventSink: what the prefix cache reports as its content changes — a
// run of full blocks registered under their chained hashes, hashes evicted,
// everything forgotten. server/kv_events turns these into vLLM's KV events
// (BlockStored / BlockRemoved / AllBlocksCleared); the scheduler knows nothing
// of how they travel.
//
// Called on the engine-loop thread in the middle of a step: an implementation
// must only copy the data into a bounded queue and return (no I/O, no locks
// held for long). Spans are valid for the call only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "scheduler/block_hash.h"

namespace tessera {

class KvCacheEventSink {
 public:
  virtual ~KvCacheEventSink() = default;

  // `hashes` (chained, in order) were registered; `parent` is the hash of the
  // block before the first (nullopt: the first is a sequence's first block);
  // `token_ids` holds hashes.size() * block_size tokens, block after block.
  virtual void OnBlocksStored(std::optional<BlockHash> parent, std::span<const BlockHash> hashes,
                              std::span<const int32_t> token_ids, int32_t block_size) = 0;
  // These hashes left the cache (their blocks were reused for other content).
  virtual void OnBlocksRemoved(std::span<const BlockHash> hashes) = 0;
  // Every cached hash was dropped.
  virtual void OnAllBlocksCleared() = 0;
};

}  // namespace tessera
