#include "runtime/kv_connectors/tier_connector.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "common/log.h"

#include "engine/kv_cache.h"
#include "scheduler/scheduler.h"

namespace tessera {
namespace {

constexpr int64_t kSaltTtlNs = int64_t{25} * 3600 * 1000000000;  // past the longest hold (24 h)

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StatusOr<std::unique_ptr<TierConnector>> TierConnector::Create(KvTierOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<KvTierManager> tiers, KvTierManager::Create(std::move(options)));
  return std::unique_ptr<TierConnector>(new TierConnector(std::move(tiers)));
}

bool TierConnector::Offers(const Request& request) const {
  return !request.remote_kv && !request.params.prompt_logprobs;
}

int64_t TierConnector::MaxBlocks(const Request& /*request*/) const { return std::numeric_limits<int64_t>::max(); }

void TierConnector::NoteRetained(const Request& request, std::span<const BlockHash> hashes) {
  if (request.retention.prefixes.empty()) return;
  const int64_t now = NowNs();
  for (const BlockHash& h : hashes) retained_salts_[h] = {request.cache_salt, now};
  if (retained_salts_.size() < 2 * salts_pruned_at_) return;
  std::erase_if(retained_salts_, [&](const auto& e) { return now - e.second.seen_ns > kSaltTtlNs; });
  salts_pruned_at_ = std::max<size_t>(1024, retained_salts_.size());
}

bool TierConnector::HoldUntil(const BlockHash& hash, int64_t until_ns) {
  auto it = retained_salts_.find(hash);
  return it != retained_salts_.end() && tiers_->Pin(hash, it->second.cache_salt, until_ns);
}

void TierConnector::OnLoadPlanned(const Request& request, const KvLoadPlan& plan) {
  NoteRetained(request, plan.hashes);
  fetches_.push_back({plan.id, plan.request_id, request.cache_salt, plan.first_block, plan.hashes});
}

void TierConnector::OnBlocksComputed(const Request& request,
                                     std::span<const std::pair<BlockId, BlockHash>> blocks) {
  for (const auto& [block, hash] : blocks) {
    spills_.push_back({block, hash, request.cache_salt});
    if (!request.retention.prefixes.empty()) NoteRetained(request, std::span<const BlockHash>(&hash, 1));
  }
}

std::optional<ComputeReason> TierConnector::MissReason(const BlockHash& hash) const {
  if (tiers_->NotWrittenThrough(hash)) return ComputeReason::kNotWritten;
  return std::nullopt;
}

void TierConnector::BeforeStep(Scheduler& scheduler, KvCache& cache) {
  pool_ = &scheduler.kv_cache().pool();
  for (KvTierFetched& f : tiers_->TakeFetched()) {
    int64_t first = 0;
    const std::vector<BlockId> blocks =
        scheduler.AllocateKvLoad(f.fetch.load_id, static_cast<int64_t>(f.blocks.size()), &first);
    // blocks[i] receives fetched block (first - fetch.first_block) + i.
    const size_t skip = static_cast<size_t>(first - f.fetch.first_block);
    bool ok = !blocks.empty();
    for (size_t i = 0; ok && i < blocks.size(); ++i) {
      Status s = cache.WriteBlock(blocks[i], f.blocks[skip + i]);
      if (!s.ok()) {
        LogWarn("kv tiers: request '{}': {}; computing its prompt instead", f.fetch.request_id, s.ToString());
        ok = false;
      }
    }
    std::vector<CacheSource> sources;
    sources.reserve(f.tier_of.size());
    for (int t : f.tier_of) {
      sources.push_back(CacheSourceOfTier(tiers_->tier_names()[static_cast<size_t>(t)]).value_or(source()));
    }
    scheduler.FinishKvLoad(f.fetch.load_id, ok, sources);
    if (ok) {
      const int64_t n = static_cast<int64_t>(blocks.size());
      tiers_->NoteLoaded(n, n * cache.block_size());
    }
  }
  scheduler.PlanKvLoads(*this);
  std::vector<KvTierFetch> fetches = std::move(fetches_);
  fetches_.clear();
  for (KvTierFetch& f : fetches) {
    const uint64_t id = f.load_id;
    if (!tiers_->Fetch(std::move(f))) scheduler.FinishKvLoad(id, false);  // busy: prefill it here
  }
}

void TierConnector::AfterStep(KvCache& cache) {
  for (const Spill& s : spills_) {
    std::string bytes;
    if (Status st = cache.ReadBlock(s.block, &bytes); !st.ok()) {
      LogWarn("kv tiers: {}", st.ToString());
      continue;
    }
    // A held block is pinned below for as long as the pool holds it.
    const int64_t pin_until = pool_ != nullptr ? pool_->retained_until(s.block) : 0;
    tiers_->Spill(s.hash, s.cache_salt, std::move(bytes), pin_until);
  }
  spills_.clear();
}

}  // namespace tessera
