#include "engine/kv_tiers/disk_kv_store.h"
#include "common/log.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>


#include "engine/kv_tiers/kv_block_record.h"

namespace tessera::kv_tiers {
namespace {

namespace fs = std::filesystem;
constexpr const char* kExt = ".kvb";

StatusOr<std::string> ReadFile(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("no file " + path);
  std::string out;
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (out.size() > limit) break;
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<DiskKvStore>> DiskKvStore::Open(const DiskKvStoreOptions& options) {
  if (options.dir.empty()) return InvalidArgument("disk KV store: no directory");
  if (options.max_bytes <= 0) return InvalidArgument("disk KV store: max_bytes must be positive");
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) return InvalidArgument("disk KV store: cannot create " + options.dir + ": " + ec.message());
  std::unique_ptr<DiskKvStore> s(new DiskKvStore(options));
  RETURN_IF_ERROR(s->Scan());
  return s;
}

std::string DiskKvStore::PathOfId(const std::string& id) const {
  return options_.dir + "/" + id.substr(0, 2) + "/" + id + kExt;
}

std::string DiskKvStore::PathOf(const KvBlockKey& key) const { return PathOfId(KeyId(key)); }

Status DiskKvStore::Scan() {
  struct Found {
    std::string id;
    int64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(options_.dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (p.extension() != kExt) {
      if (name.find(".tmp.") != std::string::npos) fs::remove(p, ec);  // an interrupted Put
      continue;
    }
    auto bytes = ReadFile(p.string(), kKvRecordHeaderBytes + kMaxKeyBytes);
    StatusOr<KvRecordHeader> h = bytes.ok() ? DecodeKvRecordHeader(*bytes) : StatusOr<KvRecordHeader>(bytes.status());
    const int64_t size = static_cast<int64_t>(it->file_size(ec));
    if (!h.ok() || static_cast<uint64_t>(size) != kKvRecordHeaderBytes + h->key.size() + h->payload_size ||
        p.stem().string().size() != 32) {
      LogWarn("disk KV store: dropping {}: {}", p.string(), h.ok() ? "size mismatch" : h.status().message());
      fs::remove(p, ec);
      ++stats_.corrupt;
      continue;
    }
    found.push_back({p.stem().string(), size, it->last_write_time(ec)});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lock(mu_);
  for (const Found& f : found) {
    entries_[f.id] = {f.bytes, lru_.insert(lru_.end(), f.id)};
    stats_.bytes_stored += f.bytes;
  }
  stats_.blocks_stored = static_cast<int64_t>(entries_.size());
  (void)EvictLocked(0);  // pins do not survive a restart: nothing is pinned yet
  if (!found.empty()) {
    LogInfo("disk KV store: {} blocks ({:.1f} MiB) kept from a previous run in {}", entries_.size(),
            stats_.bytes_stored / 1048576.0, options_.dir);
  }
  return Status::Ok();
}

void DiskKvStore::EraseLocked(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  stats_.bytes_stored -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
  stats_.blocks_stored = static_cast<int64_t>(entries_.size());
}

bool DiskKvStore::EvictLocked(int64_t incoming) {
  std::error_code ec;
  const int64_t now = options_.clock();
  for (auto victim = lru_.begin(); victim != lru_.end() && stats_.bytes_stored + incoming > options_.max_bytes;) {
    const std::string id = *victim++;
    if (entries_.at(id).pinned_until > now) continue;  // retained: kept until its pin ends
    EraseLocked(id);
    fs::remove(PathOfId(id), ec);
    ++stats_.evictions;
  }
  return stats_.bytes_stored + incoming <= options_.max_bytes;
}

Status DiskKvStore::Put(const KvBlockKey& key, std::string_view bytes) {
  const std::string record = EncodeKvRecord(key, bytes, options_.secret);
  const int64_t size = static_cast<int64_t>(record.size());
  if (size > options_.max_bytes) {
    return ResourceExhausted("disk KV store: a block of " + std::to_string(size) + " bytes exceeds the bound");
  }
  const std::string id = KeyId(key);
  const std::string path = PathOfId(id);
  std::string tmp;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tmp = path + ".tmp." + std::to_string(tmp_counter_++);
  }
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(record.data(), static_cast<std::streamsize>(record.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.errors;
      return Status(StatusCode::kUnavailable, "disk KV store: cannot write " + tmp);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  int64_t pinned_until = 0;  // a replaced block keeps its pin
  if (auto it = entries_.find(id); it != entries_.end()) pinned_until = it->second.pinned_until;
  EraseLocked(id);
  if (!EvictLocked(size)) {
    fs::remove(tmp, ec);
    fs::remove(path, ec);
    ++stats_.errors;
    return ResourceExhausted("disk KV store: full of pinned (retained) blocks");
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    ++stats_.errors;
    return Status(StatusCode::kUnavailable, "disk KV store: cannot rename into " + path);
  }
  entries_[id] = {size, lru_.insert(lru_.end(), id), pinned_until};
  stats_.bytes_stored += size;
  stats_.blocks_stored = static_cast<int64_t>(entries_.size());
  ++stats_.puts;
  stats_.put_bytes += static_cast<int64_t>(bytes.size());
  return Status::Ok();
}

StatusOr<std::string> DiskKvStore::Get(const KvBlockKey& key) {
  const std::string id = KeyId(key);
  const std::string path = PathOfId(id);
  int64_t expected = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      ++stats_.misses;
      return NotFound("disk KV store: miss");
    }
    expected = it->second.bytes;
    lru_.splice(lru_.end(), lru_, it->second.lru);
  }
  auto record = ReadFile(path, static_cast<size_t>(expected) + 1);
  KvRecordFault fault = KvRecordFault::kCorrupt;  // an unreadable file counts as corrupt
  StatusOr<std::string> payload =
      record.ok() ? DecodeKvRecord(*record, key, options_.secret, &fault) : StatusOr<std::string>(record.status());
  std::error_code ec;
  std::lock_guard<std::mutex> lock(mu_);
  if (!payload.ok()) {
    LogWarn("disk KV store: dropping {}: {}", path, payload.status().message());
    EraseLocked(id);
    fs::remove(path, ec);
    ++(fault == KvRecordFault::kUnauthenticated ? stats_.rejected : stats_.corrupt);
    ++stats_.misses;
    return NotFound("disk KV store: bad block dropped (" + payload.status().message() + ")");
  }
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // LRU order across restarts
  ++stats_.hits;
  stats_.hit_bytes += static_cast<int64_t>(payload->size());
  return payload;
}

StatusOr<bool> DiskKvStore::Contains(const KvBlockKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.count(KeyId(key)) != 0;
}

Status DiskKvStore::Delete(const KvBlockKey& key) {
  const std::string id = KeyId(key);
  std::error_code ec;
  std::lock_guard<std::mutex> lock(mu_);
  EraseLocked(id);
  fs::remove(PathOfId(id), ec);
  return Status::Ok();
}

bool DiskKvStore::Pin(const KvBlockKey& key, int64_t until_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(KeyId(key));
  if (it == entries_.end()) return false;
  it->second.pinned_until = std::max(it->second.pinned_until, until_ns);
  return true;
}

KvStoreStats DiskKvStore::stats() const {
  const int64_t now = options_.clock();
  std::lock_guard<std::mutex> lock(mu_);
  KvStoreStats s = stats_;
  for (const auto& [id, e] : entries_) s.pinned_blocks += e.pinned_until > now;
  return s;
}

}  // namespace tessera::kv_tiers
