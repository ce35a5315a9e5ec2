#include "engine/kv_tiers/host_kv_store.h"

#include "engine/kv_tiers/kv_block_record.h"

namespace tessera::kv_tiers {

void HostKvStore::EraseLocked(std::unordered_map<std::string, Entry>::iterator it) {
  stats_.bytes_stored -= static_cast<int64_t>(it->second.record.size());
  --stats_.blocks_stored;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

Status HostKvStore::Put(const KvBlockKey& key, std::string_view bytes) {
  std::string record = EncodeKvRecord(key, bytes);
  const int64_t size = static_cast<int64_t>(record.size());
  if (size > options_.max_bytes) {
    return ResourceExhausted("host kv tier: a block of " + std::to_string(size) + " bytes exceeds the bound of " +
                             std::to_string(options_.max_bytes));
  }
  const std::string id = KeyId(key);
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) EraseLocked(it);
  while (stats_.bytes_stored + size > options_.max_bytes && !lru_.empty()) {
    EraseLocked(entries_.find(lru_.front()));
    ++stats_.evictions;
  }
  lru_.push_back(id);
  entries_.emplace(id, Entry{std::move(record), std::prev(lru_.end())});
  stats_.bytes_stored += size;
  ++stats_.blocks_stored;
  ++stats_.puts;
  stats_.put_bytes += static_cast<int64_t>(bytes.size());
  return Status::Ok();
}

StatusOr<std::string> HostKvStore::Get(const KvBlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(KeyId(key));
  if (it == entries_.end()) {
    ++stats_.misses;
    return NotFound("host kv tier: no such block");
  }
  StatusOr<std::string> payload = DecodeKvRecord(it->second.record, key);
  if (!payload.ok()) {
    EraseLocked(it);
    ++stats_.corrupt;
    ++stats_.misses;
    return NotFound("host kv tier: dropped a bad block: " + payload.status().message());
  }
  lru_.splice(lru_.end(), lru_, it->second.lru);
  ++stats_.hits;
  stats_.hit_bytes += static_cast<int64_t>(payload->size());
  return payload;
}

StatusOr<bool> HostKvStore::Contains(const KvBlockKey& key) {
  std::lock_guard lock(mu_);
  return entries_.count(KeyId(key)) != 0;
}

Status HostKvStore::Delete(const KvBlockKey& key) {
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(KeyId(key)); it != entries_.end()) EraseLocked(it);
  return Status::Ok();
}

KvStoreStats HostKvStore::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

bool HostKvStore::CorruptForTest(const KvBlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(KeyId(key));
  if (it == entries_.end() || it->second.record.empty()) return false;
  it->second.record.back() ^= 0x5a;
  return true;
}

}  // namespace tessera::kv_tiers
