// The scheduler's side of the KV tiers (docs/architecture.md, "KV connectors"):
// which computed blocks spill, which prompt blocks are fetched back before a
// prefill, and how fetched bytes join the prefix cache. The engine loop
// (engine_loop_tiers.cc) moves the bytes between these calls.
#include <algorithm>

#include "scheduler/scheduler.h"

namespace tessera {

std::vector<KvTierSpill> Scheduler::TakeTierSpills() {
  std::vector<KvTierSpill> out;
  out.swap(tier_spills_);
  return out;
}

std::vector<KvTierFetch> Scheduler::PlanTierFetches() {
  std::vector<KvTierFetch> fetches;
  if (in_flight_) return fetches;
  for (Sequence* seq : waiting_) {
    if (!seq->tier_fetch_pending) continue;
    seq->tier_fetch_pending = false;
    // prompt_logprobs needs every prompt row computed: no cache hits at all.
    if (!kv_->caching_enabled() || kv_->Holds(seq->id) || seq->params().prompt_logprobs) continue;
    UpdateHashes(seq);
    const int64_t bs = kv_->block_size();
    // At least one prompt token is left to compute: its logits give the first token.
    const int64_t want =
        std::min<int64_t>((seq->num_prompt_tokens - 1) / bs, static_cast<int64_t>(seq->block_hashes.size()));
    const PrefixHit hit = kv_->FindCachedPrefix(seq->block_hashes, seq->num_tokens());
    const int64_t have = std::min<int64_t>(static_cast<int64_t>(hit.blocks.size()), want);
    if (have >= want) continue;
    KvTierFetch f;
    f.seq = seq->id;
    f.request_id = seq->request_id();
    f.cache_salt = seq->request->cache_salt;
    f.first_block = have;
    f.hashes.assign(seq->block_hashes.begin() + have, seq->block_hashes.begin() + want);
    seq->tier_loading = true;
    fetches.push_back(std::move(f));
  }
  return fetches;
}

std::vector<BlockId> Scheduler::BeginTierLoad(const KvTierFetch& fetch, int64_t num_blocks, int64_t* first_block) {
  *first_block = fetch.first_block;
  auto it = seqs_.find(fetch.seq);
  if (in_flight_ || it == seqs_.end() || num_blocks <= 0 || kv_->Holds(fetch.seq)) return {};
  Sequence* seq = it->second.get();
  const int64_t bs = kv_->block_size();
  const int64_t end = fetch.first_block + std::min<int64_t>(num_blocks, static_cast<int64_t>(fetch.hashes.size()));
  PrefixHit hit = kv_->FindCachedPrefix(seq->block_hashes, seq->num_tokens());
  if (static_cast<int64_t>(hit.blocks.size()) > end) hit.blocks.resize(static_cast<size_t>(end));
  const int64_t have = static_cast<int64_t>(hit.blocks.size());
  // The pool lost blocks before the fetched ones meanwhile: they would not
  // form a prefix (rare; the prompt is computed from the pool's hit instead).
  if (have < fetch.first_block || have >= end) return {};
  hit.num_tokens = have * bs;
  hit.num_queried_tokens = 0;  // admission counts the query
  std::vector<CopyOp> copies;  // fresh blocks past the hit: nothing to copy
  if (!kv_->AllocateSlots(seq->id, hit.num_tokens, (end - have) * bs, 0, &hit, &copies)) return {};
  *first_block = have;
  const auto blocks = kv_->blocks(seq->id);
  return std::vector<BlockId>(blocks.begin() + have, blocks.begin() + end);
}

void Scheduler::EndTierLoad(const KvTierFetch& fetch, int64_t num_blocks_total, bool ok) {
  auto it = seqs_.find(fetch.seq);
  if (it == seqs_.end()) {
    kv_->Free(fetch.seq);  // ended meanwhile (no-op when it held nothing)
    return;
  }
  Sequence* seq = it->second.get();
  seq->tier_loading = false;
  if (!kv_->Holds(seq->id)) return;
  if (ok) {
    kv_->CacheComputedBlocks(seq->id, seq->block_hashes, num_blocks_total * kv_->block_size(), seq->token_ids);
  }
  // Released blocks keep their hashes (ok) and sit at the most recently used
  // end of the free queue: the admission that follows finds them as a hit.
  kv_->Free(seq->id);
}

bool Scheduler::WaitingOnLoadsOnly() const {
  if (!running_.empty() || waiting_.empty()) return false;
  return std::all_of(waiting_.begin(), waiting_.end(),
                     [](const Sequence* s) { return s->tier_loading || s->kv_loading; });
}

}  // namespace tessera
