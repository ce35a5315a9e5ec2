// HostKvStore (--kv-offload-host-gb): blocks in host DRAM, bounded in total
// bytes with least-recently-used eviction that passes over pinned (retained)
// blocks; lost on restart. The tier right
// below the device pool: on a GPU instance it saves a recompute for the price
// of a host-to-device copy; on a CPU instance it still holds blocks the
// (smaller) pool evicted.
//
// Values are records (kv_block_record.h) like every tier's, so Get checks
// size, checksum and key the same way (host memory is not trusted more than
// disk: a bad record is dropped, counted, and reported as a miss).
//
// Thread-safe: one mutex; Put/Get copy the block's bytes under it (memcpy,
// microseconds for a block).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/kv_tiers/kv_block_store.h"

namespace tessera::kv_tiers {

struct HostKvStoreOptions {
  int64_t max_bytes = int64_t{1} << 30;  // total record bytes kept
  std::function<int64_t()> clock = KvPinClockNs;  // for pins; tests pass a fake
};

class HostKvStore final : public KvBlockStore {
 public:
  explicit HostKvStore(HostKvStoreOptions options) : options_(options) {}

  Status Put(const KvBlockKey& key, std::string_view bytes) override;
  StatusOr<std::string> Get(const KvBlockKey& key) override;
  StatusOr<bool> Contains(const KvBlockKey& key) override;
  Status Delete(const KvBlockKey& key) override;
  KvStoreStats stats() const override;  // O(blocks stored): counts pins
  const char* name() const override { return "host"; }
  bool Pin(const KvBlockKey& key, int64_t until_ns) override;

  // Tests: flips one payload byte of the stored record (as a bit error would).
  bool CorruptForTest(const KvBlockKey& key);

 private:
  struct Entry {
    std::string record;
    std::list<std::string>::iterator lru;
    int64_t pinned_until = 0;
  };
  void EraseLocked(std::unordered_map<std::string, Entry>::iterator it);

  const HostKvStoreOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;  // KeyId -> record
  std::list<std::string> lru_;                      // least recently used first
  KvStoreStats stats_;
};

}  // namespace tessera::kv_tiers
