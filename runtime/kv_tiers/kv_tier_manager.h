// KvTierManager: the KV tiers below the device pool of one instance
// (docs/architecture.md, "KV connectors") and the threads that move bytes to and from them, so the engine
// loop never waits on memory copies into the host tier, disk or Redis.
//
// Tiers, fastest first: host DRAM (--kv-offload-host-gb), local disk
// (--kv-offload-disk-dir, --kv-offload-disk-gb), a shared Redis/Valkey
// (--kv-offload-remote-url). Policy (LMCache's): every full block computed
// here is written through to every tier asynchronously (Spill; a tier whose
// queue is full skips the block, counted); a fetch looks for a prompt's blocks
// in order, each block in the fastest tier that has it, and stops at the
// first block no tier has. A block found in a slower tier is copied into the
// faster ones. Every block read is checked (record size, checksum, the full
// key: model fingerprint, KV layout, chained hash, tenant) by the store, and
// its payload size here; a bad block ends the run there (recompute from it).
//
// Keys: KvBlockKey{fingerprint, layout, hash, tenant}; the tenant tag is a
// digest of the request's cache_salt (never the salt, never prompt text).
//
// Threading: Spill/Fetch/TakeFetched/stats from any thread (the engine loop);
// spills run on each tier's AsyncKvStore workers, fetches on this manager's
// loader threads; `notify` and `on_op` run on those threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/kv_tiers/async_kv_store.h"
#include "engine/kv_tiers/kv_block_store.h"
#include "scheduler/block_hash.h"
#include "scheduler/cache_waterfall.h"

namespace tessera {

enum class KvTierOp { kSpill, kLoad };

// A lookup of a waiting request's prompt blocks that the device pool lacks:
// the tiers are asked for the longest leading run of `hashes` (blocks
// [first_block, first_block + hashes.size()) of the prompt).
struct KvTierFetch {
  uint64_t load_id = 0;  // the scheduler's KV load (Scheduler::FinishKvLoad)
  std::string request_id;
  std::string cache_salt;
  int64_t first_block = 0;
  std::vector<BlockHash> hashes;
};

struct KvTierOptions {
  // The tiers (serve flags). A tier is on when its size / dir / url is set.
  int64_t host_bytes = 0;
  std::string disk_dir;
  int64_t disk_bytes = int64_t{10} << 30;
  std::string remote_url;  // redis://HOST:PORT[/DB]
  // --kv-offload-secret-file's contents ("" : none): the disk and Redis tiers
  // authenticate records with an HMAC under it and refuse (recompute) any
  // record whose MAC is not this secret's. The host tier (process memory) does not.
  std::string secret;
  // Tests (and benches): these stores instead of / after the ones above.
  std::vector<std::shared_ptr<kv_tiers::KvBlockStore>> extra_stores;

  // Set by the engine loop: what makes a block's bytes valid here.
  std::string model_fingerprint;
  std::string layout;
  int64_t block_bytes = 0;  // KvCache::BlockBytes()

  int num_loaders = 2;                            // fetch threads
  int64_t spill_queue_bytes = int64_t{256} << 20;  // per tier: queued spill bytes beyond which blocks are skipped
  // A fetch finished (TakeFetched has it): wake the engine loop. Cheap.
  std::function<void()> notify;
  // One block moved (tier name, op, seconds: a spill from submit to stored, a
  // load the store's Get). Metrics; cheap and thread-safe.
  std::function<void(const std::string& tier, KvTierOp op, double seconds)> on_op;
};

bool KvTiersConfigured(const KvTierOptions& o);

// A fetch's answer: the bytes of its first blocks.size() blocks (leading run).
struct KvTierFetched {
  KvTierFetch fetch;
  std::vector<std::string> blocks;
  std::vector<int> tier_of;  // index into stats() of the tier each block came from
};

struct KvTierStats {
  std::string name;                // "host", "disk", "redis"
  kv_tiers::KvStoreStats store;    // hits, misses, corrupt, rejected, errors (unavailable), puts, bytes
  int64_t spills_skipped = 0;      // queue full: block not written to this tier
  int64_t spill_errors = 0;        // Put failed (unavailable, too large)
  int64_t bad_size = 0;            // a checked record whose payload is not one block here
};

struct KvTierTotals {
  int64_t fetches = 0;          // lookups of a request's prompt blocks
  int64_t fetches_refused = 0;  // loader queue full: prefilled without a lookup
  int64_t blocks_found = 0;     // blocks the tiers returned
  int64_t blocks_loaded = 0;    // of those, written into the device pool (EngineLoop reports)
  int64_t tokens_loaded = 0;
};

class KvTierManager {
 public:
  // Opens the configured tiers: the disk tier scans its directory (keeping
  // valid blocks of earlier runs), the Redis tier does not connect yet (an
  // unreachable server only means misses). INVALID_ARGUMENT for a bad URL.
  static StatusOr<std::unique_ptr<KvTierManager>> Create(KvTierOptions options);
  ~KvTierManager();  // finishes queued spills and fetches, joins the threads

  // Queues `bytes` (one block) for every tier. Never blocks. With
  // `pin_until_ns` > 0 (a retained block; docs/architecture.md, "Retention")
  // each tier that can pins it until then once stored (KvBlockStore::Pin).
  void Spill(const BlockHash& hash, const std::string& cache_salt, std::string bytes, int64_t pin_until_ns = 0);
  // Pins a stored block in every tier that has it and can pin, until
  // `until_ns`; true when one does. Index operations only (the loop calls it).
  bool Pin(const BlockHash& hash, const std::string& cache_salt, int64_t until_ns);
  // Queues a lookup; false (nothing queued) when too many are in flight.
  bool Fetch(KvTierFetch fetch);
  // Fetches answered since the last call.
  std::vector<KvTierFetched> TakeFetched();
  // Waits until no spill or fetch is queued or running (tests, benches).
  void Drain();

  void NoteLoaded(int64_t blocks, int64_t tokens);
  // Whether `hash` was spilled recently and no tier has stored it yet (every
  // write skipped for a full queue, failed, or still queued): the cache
  // waterfall's not_written. Remembers the last kUnwrittenCapacity spills.
  bool NotWrittenThrough(const BlockHash& hash) const;
  static constexpr size_t kUnwrittenCapacity = 65536;
  std::vector<KvTierStats> stats() const;
  KvTierTotals totals() const;
  const std::vector<std::string>& tier_names() const { return names_; }
  // The key of one block here (tests check keys; the tiers use it).
  kv_tiers::KvBlockKey KeyOf(const BlockHash& hash, const std::string& cache_salt) const;
  kv_tiers::KvBlockStore& store(size_t i) { return *tiers_[i].store; }

 private:
  struct Tier {
    std::shared_ptr<kv_tiers::KvBlockStore> store;
    std::unique_ptr<kv_tiers::AsyncKvStore> spill;
  };
  explicit KvTierManager(KvTierOptions options) : options_(std::move(options)) {}
  void LoaderMain();
  KvTierFetched RunFetch(KvTierFetch fetch);
  void SpillTo(size_t tier, const BlockHash& hash, const kv_tiers::KvBlockKey& key, std::string bytes,
               int64_t pin_until_ns);

  KvTierOptions options_;
  std::vector<Tier> tiers_;
  std::vector<std::string> names_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // fetch queued, or stop
  std::condition_variable idle_cv_;  // no fetch queued or running
  std::deque<KvTierFetch> queue_;    // guarded by mu_
  int running_ = 0;                  // guarded by mu_
  bool stop_ = false;                // guarded by mu_
  std::vector<KvTierFetched> done_;  // guarded by mu_
  std::vector<KvTierStats> extra_;   // guarded by mu_: spills_skipped, spill_errors, bad_size per tier
  KvTierTotals totals_;              // guarded by mu_
  RecentBlockHashes unwritten_{kUnwrittenCapacity};  // guarded by mu_: spilled, in no tier yet
  std::vector<std::thread> loaders_;
};

}  // namespace tessera
