// KvBlockStore: one full KV block's bytes in a tier below the device pool
// (local disk, a shared Redis/Valkey), keyed by what makes those bytes valid
// anywhere: the model (fingerprint), the KV layout, the block's chained
// prefix hash (scheduler/block_hash.h's SHA-256 digest: engine/ does not
// depend on scheduler/), and an optional tenant tag (a digest of the cache_salt,
// never the salt or any prompt text).
//
// Every value is stored as a record (kv_block_record.h) whose header repeats
// the key and checksums the bytes; Get re-checks size, checksum and key, and a
// block that fails is deleted and reported as a miss (counted in stats).
//
// Implementations are thread-safe and blocking (disk or network I/O): call
// them from AsyncKvStore's workers (async_kv_store.h), never the engine loop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/sha256.h"
#include "common/status.h"

namespace tessera::kv_tiers {

struct KvBlockKey {
  std::string model_fingerprint;  // e.g. kv_transfer's ModelFingerprint (hex)
  std::string layout;             // e.g. "bs16 f16 L28 H8 D128"
  Sha256Digest hash{};            // the block's chained hash (BlockHash::digest)
  std::string tenant;             // "" : none; else a digest of the tenant's salt
  bool operator==(const KvBlockKey&) const = default;
};

// The key as one canonical byte string (length-prefixed fields): what record
// headers hold and what store keys are derived from.
std::string SerializeKey(const KvBlockKey& key);
// 32 hex digits naming the key (two 64-bit digests of SerializeKey): file
// names and Redis keys. Collisions are caught by the record's key check.
std::string KeyId(const KvBlockKey& key);

struct KvStoreStats {
  int64_t puts = 0;
  int64_t put_bytes = 0;
  int64_t hits = 0;
  int64_t hit_bytes = 0;
  int64_t misses = 0;
  int64_t corrupt = 0;      // records that failed validation (dropped)
  int64_t rejected = 0;     // records whose MAC did not verify (dropped; a subset of nothing else)
  int64_t errors = 0;       // I/O or connection failures
  int64_t evictions = 0;    // dropped to stay within the size bound
  int64_t bytes_stored = 0; // disk: current total; Redis: not tracked (0)
  int64_t blocks_stored = 0;
  int64_t pinned_blocks = 0;  // held for a retention (Pin) and not yet past it
};

// The clock pins are in: steady_clock nanoseconds, the scheduler's clock.
int64_t KvPinClockNs();

class KvBlockStore {
 public:
  virtual ~KvBlockStore() = default;
  // Stores (or replaces) the block. UNAVAILABLE when the store cannot be
  // reached; RESOURCE_EXHAUSTED when the block alone exceeds the store's bound.
  virtual Status Put(const KvBlockKey& key, std::string_view bytes) = 0;
  // The block's bytes. NOT_FOUND on a miss, including a record that failed
  // validation (deleted); UNAVAILABLE when the store cannot be reached.
  virtual StatusOr<std::string> Get(const KvBlockKey& key) = 0;
  virtual StatusOr<bool> Contains(const KvBlockKey& key) = 0;
  virtual Status Delete(const KvBlockKey& key) = 0;
  virtual KvStoreStats stats() const = 0;
  // Retention (docs/architecture.md, "Retention"): keeps the stored block
  // until `until_ns` (KvPinClockNs; a later time extends, an earlier one
  // changes nothing): its own eviction passes over it until then, and a Put
  // that finds only pinned blocks to evict is refused. True when the block
  // is stored (and now pinned). Never does I/O (an index operation): the
  // engine loop calls it. Default: the store cannot pin (a shared Redis
  // evicts on its own terms), false.
  virtual bool Pin(const KvBlockKey& /*key*/, int64_t /*until_ns*/) { return false; }
  virtual const char* name() const = 0;  // "disk", "redis"
};

}  // namespace tessera::kv_tiers
