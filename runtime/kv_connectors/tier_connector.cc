#include "runtime/kv_connectors/tier_connector.h"
#include "common/log.h"

#include <limits>


#include "engine/kv_cache.h"
#include "scheduler/scheduler.h"

namespace tessera {

StatusOr<std::unique_ptr<TierConnector>> TierConnector::Create(KvTierOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<KvTierManager> tiers, KvTierManager::Create(std::move(options)));
  return std::unique_ptr<TierConnector>(new TierConnector(std::move(tiers)));
}

bool TierConnector::Offers(const Request& request) const {
  return !request.remote_kv && !request.params.prompt_logprobs;
}

int64_t TierConnector::MaxBlocks(const Request& /*request*/) const { return std::numeric_limits<int64_t>::max(); }

void TierConnector::OnLoadPlanned(const Request& request, const KvLoadPlan& plan) {
  fetches_.push_back({plan.id, plan.request_id, request.cache_salt, plan.first_block, plan.hashes});
}

void TierConnector::OnBlocksComputed(const Request& request,
                                     std::span<const std::pair<BlockId, BlockHash>> blocks) {
  for (const auto& [block, hash] : blocks) spills_.push_back({block, hash, request.cache_salt});
}

std::optional<ComputeReason> TierConnector::MissReason(const BlockHash& hash) const {
  if (tiers_->NotWrittenThrough(hash)) return ComputeReason::kNotWritten;
  return std::nullopt;
}

void TierConnector::BeforeStep(Scheduler& scheduler, KvCache& cache) {
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
    tiers_->Spill(s.hash, s.cache_salt, std::move(bytes));
  }
  spills_.clear();
}

}  // namespace tessera
