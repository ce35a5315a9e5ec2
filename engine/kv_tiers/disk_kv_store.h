// DiskKvStore (--kv-offload-disk-dir): blocks as files under one directory,
// bounded in total bytes with least-recently-used eviction that passes over
// pinned (retained) blocks, kept across restarts of the instance (pins are not).
//
// Files: DIR/<2 hex>/<KeyId>.kvb, each a record (kv_block_record.h) written to
// a temporary name and renamed, so a crash leaves whole files or none. Open()
// scans DIR and checks every header (magic, version, header checksum, size);
// a file that fails is deleted. Get checks the whole record (size, payload
// checksum, key); a bad one is deleted, counted and reported as a miss. LRU
// order survives a restart through file modification times (Get touches).
//
// Thread-safe: one mutex guards the index (never held during file I/O of
// block bytes). Put/Get cost one file write/read of the block.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/kv_tiers/kv_block_store.h"

namespace tessera::kv_tiers {

struct DiskKvStoreOptions {
  std::string dir;                    // created if missing
  int64_t max_bytes = int64_t{1} << 30;  // total record bytes kept
  // The deployment secret records are authenticated under ("" : none): with
  // one, a record whose MAC is not this secret's is refused (kv_block_record.h).
  std::string secret = "";
  std::function<int64_t()> clock = KvPinClockNs;  // for pins; tests pass a fake
};

class DiskKvStore final : public KvBlockStore {
 public:
  static StatusOr<std::unique_ptr<DiskKvStore>> Open(const DiskKvStoreOptions& options);

  Status Put(const KvBlockKey& key, std::string_view bytes) override;
  StatusOr<std::string> Get(const KvBlockKey& key) override;
  StatusOr<bool> Contains(const KvBlockKey& key) override;
  Status Delete(const KvBlockKey& key) override;
  KvStoreStats stats() const override;  // O(blocks stored): counts pins
  const char* name() const override { return "disk"; }
  bool Pin(const KvBlockKey& key, int64_t until_ns) override;

  // The file a key's record lives in (tests corrupt it).
  std::string PathOf(const KvBlockKey& key) const;

 private:
  explicit DiskKvStore(const DiskKvStoreOptions& options) : options_(options) {}
  Status Scan();
  void EraseLocked(const std::string& id);  // index only
  // Evicts unpinned blocks until `incoming` more bytes fit; false when pins leave no room.
  bool EvictLocked(int64_t incoming);
  std::string PathOfId(const std::string& id) const;

  DiskKvStoreOptions options_;
  mutable std::mutex mu_;
  struct Entry {
    int64_t bytes = 0;
    std::list<std::string>::iterator lru;
    int64_t pinned_until = 0;
  };
  std::unordered_map<std::string, Entry> entries_;  // KeyId -> file
  std::list<std::string> lru_;                      // least recently used first
  KvStoreStats stats_;
  uint64_t tmp_counter_ = 0;
};

}  // namespace tessera::kv_tiers
