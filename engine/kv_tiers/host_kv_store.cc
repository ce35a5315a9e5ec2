#include "engine/kv_tiers/host_kv_store.h"

#include <algorithm>

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
  int64_t pinned_until = 0;  // a replaced block keeps its pin
  if (auto it = entries_.find(id); it != entries_.end()) {
    pinned_until = it->second.pinned_until;
    EraseLocked(it);
  }
  const int64_t now = options_.clock();
  for (auto victim = lru_.begin(); stats_.bytes_stored + size > options_.max_bytes && victim != lru_.end();) {
    auto e = entries_.find(*victim++);
    if (e->second.pinned_until > now) continue;  // retained: kept until its pin ends
    EraseLocked(e);
    ++stats_.evictions;
  }
  if (stats_.bytes_stored + size > options_.max_bytes) {
    ++stats_.errors;
    return ResourceExhausted("host kv tier: full of pinned (retained) blocks");
  }
  lru_.push_back(id);
  entries_.emplace(id, Entry{std::move(record), std::prev(lru_.end()), pinned_until});
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

bool HostKvStore::Pin(const KvBlockKey& key, int64_t until_ns) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(KeyId(key));
  if (it == entries_.end()) return false;
  it->second.pinned_until = std::max(it->second.pinned_until, until_ns);
  return true;
}

KvStoreStats HostKvStore::stats() const {
  const int64_t now = options_.clock();
  std::lock_guard lock(mu_);
  KvStoreStats s = stats_;
  for (const auto& [id, e] : entries_) s.pinned_blocks += e.pinned_until > now;
  return s;
}

bool HostKvStore::CorruptForTest(const KvBlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(KeyId(key));
  if (it == entries_.end() || it->second.record.empty()) return false;
  it->second.record.back() ^= 0x5a;
  return true;
}

}  // namespace tessera::kv_tiers
