// TierConnector: the KV tiers below the device pool — host DRAM, local disk,
// a shared Redis/Valkey (runtime/kv_tiers/kv_tier_manager.h) — as a KV
// connector (docs/architecture.md, "KV connectors"). Both halves in one
// class, with LMCache's policy:
//
//  - Save: every full block computed here (not loaded) is copied out of the
//    pool after the step (a memcpy, or a device-to-host copy, on the loop
//    thread) and written through to every tier by that tier's worker.
//  - Load: a new request's first choice (again after each preemption; never
//    with prompt_logprobs, which needs every prompt row computed, nor with a
//    remote KV source) whose prompt has full blocks past the pool's prefix hit
//    is looked up once (kAfterLookup): a loader thread reads its blocks in
//    order, each from the fastest tier that has it, until one is in none.
//    Before the next step the blocks the pool still lacks are allocated, the
//    bytes written in, and the blocks registered in the prefix cache; the
//    admission that follows takes them as a hit. A busy loader means the
//    prompt is computed instead.
//  - Retention (docs/architecture.md, "Retention"): a block the pool holds
//    for a retention is spilled pinned until its hold ends, and the pool's
//    RetainedBlockDemoter asks here before dropping a held block: true only
//    when the host or disk tier has it pinned that long (Redis cannot pin).
//
// Threading: scheduler-half methods are called by the Scheduler and worker
// methods by the engine loop, on the loop thread; the manager's threads run
// the I/O and wake the loop through the manager's notify.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "runtime/kv_connectors/kv_connector_worker.h"
#include "runtime/kv_tiers/kv_tier_manager.h"
#include "scheduler/kv_connector.h"

namespace tessera {

class TierConnector final : public KvConnector, public KvConnectorWorker, public RetainedBlockDemoter {
 public:
  // Opens the tiers (KvTierManager::Create); options must carry the
  // fingerprint, layout, block size in bytes and notify.
  static StatusOr<std::unique_ptr<TierConnector>> Create(KvTierOptions options);

  KvTierManager& tiers() const { return *tiers_; }

  // KvConnector (scheduler half).
  const char* name() const override { return "tiers"; }
  Allocation allocation() const override { return Allocation::kAfterLookup; }
  bool Offers(const Request& request) const override;
  bool OffersAgainAfterPreemption() const override { return true; }
  int64_t MaxBlocks(const Request& request) const override;
  void OnLoadPlanned(const Request& request, const KvLoadPlan& plan) override;
  bool WantsComputedBlocks() const override { return true; }
  void OnBlocksComputed(const Request& request, std::span<const std::pair<BlockId, BlockHash>> blocks) override;
  // The cache waterfall: loads name each block's tier (a store that is not
  // host, disk or redis — tests' extra stores — counts as host).
  CacheSource source() const override { return CacheSource::kHost; }
  std::optional<ComputeReason> MissReason(const BlockHash& hash) const override;

  // KvConnectorWorker (executor half).
  void BeforeStep(Scheduler& scheduler, KvCache& cache) override;
  void AfterStep(KvCache& cache) override;

  // RetainedBlockDemoter (the pool, on the loop thread).
  bool HoldUntil(const BlockHash& hash, int64_t until_ns) override;

 private:
  // A full block just registered in the prefix cache: its bytes are valid
  // until the next Schedule().
  struct Spill {
    BlockId block = -1;
    BlockHash hash;
    std::string cache_salt;  // the request's; becomes the tier key's tenant tag (a digest)
  };
  // The salt of each block a retaining request computed or loaded, to name
  // its tier key when the pool asks; entries older than kSaltTtlNs go when the map has doubled.
  struct RetainedSalt {
    std::string cache_salt;
    int64_t seen_ns = 0;
  };
  void NoteRetained(const Request& request, std::span<const BlockHash> hashes);
  std::unordered_map<BlockHash, RetainedSalt, BlockHashHasher> retained_salts_;
  size_t salts_pruned_at_ = 1024;
  const BlockPool* pool_ = nullptr;  // the scheduler's, seen at BeforeStep: a spilled block's hold
  explicit TierConnector(std::unique_ptr<KvTierManager> tiers) : tiers_(std::move(tiers)) {}

  std::vector<KvTierFetch> fetches_;  // planned, not yet handed to the manager
  std::vector<Spill> spills_;         // computed since the last AfterStep
  std::unique_ptr<KvTierManager> tiers_;
};

}  // namespace tessera
