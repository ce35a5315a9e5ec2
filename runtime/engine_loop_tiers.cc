// The engine loop's side of the KV tiers (docs/architecture.md, "KV connectors"):
// moves block bytes between the KV pool and the KvTierManager as the
// scheduler decides (scheduler_tiers.cc). Only memory copies of whole blocks
// run on the loop thread; disk and network I/O run on the manager's threads.
#include <spdlog/spdlog.h>

#include "engine/kv_transfer/kv_layout.h"
#include "runtime/engine_loop.h"

namespace tessera {

Status EngineLoop::InitKvTiers(EngineLoopOptions& options) {
  if (group_) {
    return FailedPrecondition("--kv-offload-*: KV tiers need a single rank (--tensor-parallel-size / "
                              "--data-parallel-size 1): each rank holds a slice of every block");
  }
  if (!scheduler_->kv_cache().caching_enabled()) {
    return FailedPrecondition("--kv-offload-*: KV tiers need prefix caching");
  }
  KvTierOptions to = std::move(*options.kv_tiers);
  ASSIGN_OR_RETURN(to.model_fingerprint, ModelFingerprint(options.model_dir));
  to.layout = DescribeKvLayout(
      MakeKvLayout(model_->config(), backend_->kv_dtype(), scheduler_->options().kv.block_size));
  to.block_bytes = cache_->BlockBytes();
  to.notify = [this] {
    {
      std::lock_guard lock(mu_);
      kv_wake_ = true;
    }
    cv_.notify_all();
  };
  ASSIGN_OR_RETURN(kv_tiers_, KvTierManager::Create(std::move(to)));
  std::string names;
  for (const std::string& n : kv_tiers_->tier_names()) names += (names.empty() ? "" : ", ") + n;
  spdlog::info("kv tiers: {} (blocks of {} KiB; computed blocks are written through, prompt prefixes "
               "missing from the pool are fetched back before their prefill)",
               names, cache_->BlockBytes() / 1024);
  return Status::Ok();
}

void EngineLoop::RunKvTiers() {
  {
    // Cleared before taking the answers: one arriving after this wakes the loop again.
    std::lock_guard lock(mu_);
    kv_wake_ = false;
  }
  for (KvTierFetched& f : kv_tiers_->TakeFetched()) {
    int64_t first = 0;
    const std::vector<BlockId> blocks =
        scheduler_->BeginTierLoad(f.fetch, static_cast<int64_t>(f.blocks.size()), &first);
    // blocks[i] receives fetched block (first - fetch.first_block) + i.
    const size_t skip = static_cast<size_t>(first - f.fetch.first_block);
    bool ok = !blocks.empty();
    for (size_t i = 0; ok && i < blocks.size(); ++i) {
      Status s = cache_->WriteBlock(blocks[i], f.blocks[skip + i]);
      if (!s.ok()) {
        spdlog::warn("kv tiers: request '{}': {}; computing its prompt instead", f.fetch.request_id, s.ToString());
        ok = false;
      }
    }
    const int64_t total = first + static_cast<int64_t>(blocks.size());
    scheduler_->EndTierLoad(f.fetch, total, ok);
    if (ok) {
      kv_tiers_->NoteLoaded(static_cast<int64_t>(blocks.size()),
                            static_cast<int64_t>(blocks.size()) * scheduler_->options().kv.block_size);
    }
  }
  for (KvTierFetch& f : scheduler_->PlanTierFetches()) {
    const KvTierFetch copy = f;
    if (!kv_tiers_->Fetch(std::move(f))) scheduler_->EndTierLoad(copy, 0, false);  // busy: prefill it here
  }
}

void EngineLoop::SpillComputedBlocks() {
  for (const KvTierSpill& s : scheduler_->TakeTierSpills()) {
    std::string bytes;
    if (Status st = cache_->ReadBlock(s.block, &bytes); !st.ok()) {
      spdlog::warn("kv tiers: {}", st.ToString());
      continue;
    }
    kv_tiers_->Spill(s.hash, s.cache_salt, std::move(bytes));
  }
}

}  // namespace tessera
