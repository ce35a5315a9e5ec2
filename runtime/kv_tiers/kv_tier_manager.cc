#include "runtime/kv_tiers/kv_tier_manager.h"
#include "common/log.h"

#include <algorithm>
#include <chrono>
#include <cstdio>


#include "common/sha256.h"
#include "engine/kv_tiers/disk_kv_store.h"
#include "engine/kv_tiers/host_kv_store.h"
#include "engine/kv_tiers/redis_kv_store.h"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxQueuedFetches = 1024;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// SHA-256 of the salt as hex, so keys and records never hold the salt (the
// block hash already depends on it; the tag keeps namespaces apart in a tier
// even for a block hashed without a salt by a misconfigured peer).
std::string TenantTag(const std::string& salt) {
  if (salt.empty()) return "";
  return ToHex(Sha256Of("tessera tenant\n" + salt));
}

}  // namespace

bool KvTiersConfigured(const KvTierOptions& o) {
  return o.host_bytes > 0 || !o.disk_dir.empty() || !o.remote_url.empty() || !o.extra_stores.empty();
}

StatusOr<std::unique_ptr<KvTierManager>> KvTierManager::Create(KvTierOptions options) {
  if (options.block_bytes <= 0) return InvalidArgument("kv tiers: block size in bytes unknown");
  auto m = std::unique_ptr<KvTierManager>(new KvTierManager(std::move(options)));
  const KvTierOptions& o = m->options_;
  std::vector<std::shared_ptr<kv_tiers::KvBlockStore>> stores;
  if (o.host_bytes > 0) {
    stores.push_back(std::make_shared<kv_tiers::HostKvStore>(kv_tiers::HostKvStoreOptions{o.host_bytes}));
  }
  if (!o.disk_dir.empty()) {
    kv_tiers::DiskKvStoreOptions d;
    d.dir = o.disk_dir;
    d.max_bytes = o.disk_bytes;
    d.secret = o.secret;
    auto disk = kv_tiers::DiskKvStore::Open(d);
    if (!disk.ok()) return Status(disk.status().code(), "--kv-offload-disk-dir: " + disk.status().message());
    stores.push_back(std::shared_ptr<kv_tiers::KvBlockStore>(std::move(*disk)));
  }
  if (!o.remote_url.empty()) {
    auto ro = kv_tiers::ParseRedisUrl(o.remote_url);
    if (!ro.ok()) return InvalidArgument("--kv-offload-remote-url: " + ro.status().message());
    ro->secret = o.secret;
    if (o.secret.empty()) {
      LogWarn("--kv-offload-remote-url: records in the shared tier are not authenticated; whoever can write "
              "to it can plant KV blocks that change outputs. Set --kv-offload-secret-file on every instance "
              "(docs/architecture.md, \"Tamper-proof shared KV\")");
    }
    auto redis = kv_tiers::RedisKvStore::Create(*ro);
    if (!redis.ok()) return Status(redis.status().code(), "--kv-offload-remote-url: " + redis.status().message());
    stores.push_back(std::shared_ptr<kv_tiers::KvBlockStore>(std::move(*redis)));
  }
  stores.insert(stores.end(), o.extra_stores.begin(), o.extra_stores.end());
  if (stores.empty()) return InvalidArgument("kv tiers: no tier configured");
  kv_tiers::AsyncKvStoreOptions ao;
  ao.num_workers = 1;
  ao.max_pending = std::max<int64_t>(4, o.spill_queue_bytes / o.block_bytes);
  for (auto& s : stores) {
    m->names_.push_back(s->name());
    m->tiers_.push_back({s, std::make_unique<kv_tiers::AsyncKvStore>(s, ao)});
  }
  m->extra_.resize(m->tiers_.size());
  for (int i = 0; i < std::max(1, o.num_loaders); ++i) m->loaders_.emplace_back([raw = m.get()] { raw->LoaderMain(); });
  return m;
}

KvTierManager::~KvTierManager() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : loaders_) t.join();
  // Each tier's queued spills finish now, while the members their callbacks use live.
  for (Tier& t : tiers_) t.spill.reset();
}

kv_tiers::KvBlockKey KvTierManager::KeyOf(const BlockHash& hash, const std::string& cache_salt) const {
  return {options_.model_fingerprint, options_.layout, hash.digest, TenantTag(cache_salt)};
}

void KvTierManager::SpillTo(size_t tier, const BlockHash& hash, const kv_tiers::KvBlockKey& key, std::string bytes,
                           int64_t pin_until_ns) {
  const auto start = Clock::now();
  auto done = [this, tier, start, hash, key, pin_until_ns](Status s) {
    {
      std::lock_guard lock(mu_);
      if (!s.ok()) {
        ++extra_[tier].spill_errors;
        return;
      }
      unwritten_.Erase(hash);
    }
    if (pin_until_ns > 0) (void)tiers_[tier].store->Pin(key, pin_until_ns);
    if (options_.on_op) options_.on_op(names_[tier], KvTierOp::kSpill, Since(start));
  };
  const bool queued = tiers_[tier].spill->Put(key, std::move(bytes), std::move(done));
  if (!queued) {
    std::lock_guard lock(mu_);
    ++extra_[tier].spills_skipped;
  }
}

void KvTierManager::Spill(const BlockHash& hash, const std::string& cache_salt, std::string bytes,
                         int64_t pin_until_ns) {
  const kv_tiers::KvBlockKey key = KeyOf(hash, cache_salt);
  {
    std::lock_guard lock(mu_);
    unwritten_.Insert(hash);  // until a tier stores it
  }
  for (size_t t = 0; t + 1 < tiers_.size(); ++t) SpillTo(t, hash, key, bytes, pin_until_ns);
  SpillTo(tiers_.size() - 1, hash, key, std::move(bytes), pin_until_ns);
}

bool KvTierManager::NotWrittenThrough(const BlockHash& hash) const {
  std::lock_guard lock(mu_);
  return unwritten_.Contains(hash);
}

bool KvTierManager::Pin(const BlockHash& hash, const std::string& cache_salt, int64_t until_ns) {
  const kv_tiers::KvBlockKey key = KeyOf(hash, cache_salt);
  bool held = false;
  for (Tier& t : tiers_) held = t.store->Pin(key, until_ns) || held;
  return held;
}

bool KvTierManager::Fetch(KvTierFetch fetch) {
  {
    std::lock_guard lock(mu_);
    if (stop_ || queue_.size() >= kMaxQueuedFetches) {
      ++totals_.fetches_refused;
      return false;
    }
    queue_.push_back(std::move(fetch));
    ++totals_.fetches;
  }
  cv_.notify_one();
  return true;
}

KvTierFetched KvTierManager::RunFetch(KvTierFetch fetch) {
  KvTierFetched out;
  for (const BlockHash& h : fetch.hashes) {
    const kv_tiers::KvBlockKey key = KeyOf(h, fetch.cache_salt);
    bool found = false;
    for (size_t t = 0; t < tiers_.size() && !found; ++t) {
      const auto start = Clock::now();
      StatusOr<std::string> got = tiers_[t].store->Get(key);
      if (!got.ok()) continue;  // miss, dropped bad record, or unreachable: counted by the store
      if (static_cast<int64_t>(got->size()) != options_.block_bytes) {
        // A valid record of this key with another payload size: not usable here.
        (void)tiers_[t].store->Delete(key);
        std::lock_guard lock(mu_);
        ++extra_[t].bad_size;
        continue;
      }
      if (options_.on_op) options_.on_op(names_[t], KvTierOp::kLoad, Since(start));
      for (size_t u = 0; u < t; ++u) SpillTo(u, h, key, *got, 0);  // promote into the faster tiers
      out.blocks.push_back(std::move(*got));
      out.tier_of.push_back(static_cast<int>(t));
      found = true;
    }
    if (!found) break;
  }
  out.fetch = std::move(fetch);
  return out;
}

void KvTierManager::LoaderMain() {
  for (;;) {
    KvTierFetch fetch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      fetch = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    KvTierFetched done = RunFetch(std::move(fetch));
    {
      std::lock_guard lock(mu_);
      totals_.blocks_found += static_cast<int64_t>(done.blocks.size());
      done_.push_back(std::move(done));
      --running_;
      if (queue_.empty() && running_ == 0) idle_cv_.notify_all();
    }
    if (options_.notify) options_.notify();
  }
}

std::vector<KvTierFetched> KvTierManager::TakeFetched() {
  std::lock_guard lock(mu_);
  std::vector<KvTierFetched> out;
  out.swap(done_);
  return out;
}

void KvTierManager::Drain() {
  {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
  }
  for (Tier& t : tiers_) t.spill->Drain();
}

void KvTierManager::NoteLoaded(int64_t blocks, int64_t tokens) {
  std::lock_guard lock(mu_);
  totals_.blocks_loaded += blocks;
  totals_.tokens_loaded += tokens;
}

std::vector<KvTierStats> KvTierManager::stats() const {
  std::vector<KvTierStats> out;
  {
    std::lock_guard lock(mu_);
    out = extra_;
  }
  for (size_t t = 0; t < tiers_.size(); ++t) {
    out[t].name = names_[t];
    out[t].store = tiers_[t].store->stats();
  }
  return out;
}

KvTierTotals KvTierManager::totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

}  // namespace tessera
