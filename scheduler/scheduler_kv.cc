// The scheduler's side of the KV connectors (scheduler/kv_connector.h;
// docs/architecture.md, "KV connectors"): which waiting prompts a connector
// is asked about, which blocks a load fills, how loaded blocks join the prefix
// cache, and which finished requests keep their blocks for a connector. The
// connectors' executor halves move the bytes between these calls.
#include <algorithm>
#include <bit>

#include "scheduler/scheduler.h"

namespace tessera {

void Scheduler::OfferKv(Sequence* seq, bool after_preemption) {
  if (seq->index != 0) return;
  const auto& cs = options_.kv_connectors;
  for (size_t i = 0; i < cs.size(); ++i) {
    if (after_preemption && !cs[i]->OffersAgainAfterPreemption()) continue;
    if (cs[i]->Offers(*seq->request)) seq->kv_offers |= uint32_t{1} << i;
  }
}

void Scheduler::DropKvOffers(Sequence* seq) {
  while (seq->kv_offers != 0) {
    const int i = std::countr_zero(seq->kv_offers);
    seq->kv_offers &= ~(uint32_t{1} << i);
    options_.kv_connectors[static_cast<size_t>(i)]->OnNoLoad(*seq->request, KvNoLoad::kEnded, 0);
  }
}

bool Scheduler::HoldKv(Sequence* seq) {
  const SeqId holder = seq->id;
  if (!kv_->Holds(holder)) return false;
  KvConnector* holding = nullptr;
  for (KvConnector* c : options_.kv_connectors) {
    if (c->HoldsOnFinish(*seq->request)) {
      holding = c;
      break;
    }
  }
  if (holding == nullptr) return false;
  // The sequence's blocks stay held under its (now unused) id; the connector
  // hears of the prompt's full ones.
  const auto blocks = kv_->blocks(holder);
  const size_t full = std::min<size_t>({static_cast<size_t>(seq->num_prompt_tokens / kv_->block_size()),
                                        blocks.size(), seq->block_hashes.size()});
  ReleaseKvHold(seq->request_id());  // a reused id drops its older hold
  kv_holds_[seq->request_id()] = holder;
  holding->OnHeld(seq->request_id(), blocks.first(full), std::span(seq->block_hashes).first(full));
  return true;
}

void Scheduler::PlanKvLoads(const KvConnector& connector) {
  if (in_flight_) return;
  const auto& cs = options_.kv_connectors;
  const auto pos = std::find(cs.begin(), cs.end(), &connector);
  if (pos == cs.end()) return;
  const uint32_t bit = uint32_t{1} << (pos - cs.begin());
  KvConnector* c = *pos;
  const int64_t bs = kv_->block_size();
  for (Sequence* seq : waiting_) {
    if (!(seq->kv_offers & bit) || seq->kv_load != 0) continue;
    seq->kv_offers &= ~bit;
    const Request& request = *seq->request;
    if (!kv_->caching_enabled() || kv_->Holds(seq->id)) {
      c->OnNoLoad(request, KvNoLoad::kIneligible, 0);
      continue;
    }
    UpdateHashes(seq);
    // At least one prompt token is left to compute: its logits give the first token.
    const int64_t want = std::min<int64_t>(
        {c->MaxBlocks(request), (seq->num_prompt_tokens - 1) / bs, static_cast<int64_t>(seq->block_hashes.size())});
    PrefixHit hit = kv_->FindCachedPrefix(seq->block_hashes, seq->num_tokens());
    if (static_cast<int64_t>(hit.blocks.size()) > want) hit.blocks.resize(static_cast<size_t>(std::max<int64_t>(want, 0)));
    const int64_t have = static_cast<int64_t>(hit.blocks.size());
    if (have >= want) {
      c->OnNoLoad(request, KvNoLoad::kAllCached, have);
      continue;
    }
    KvLoadState st;
    st.connector = c;
    st.plan.id = next_kv_load_++;
    st.plan.seq = seq->id;
    st.plan.request_id = seq->request_id();
    st.plan.first_block = have;
    st.plan.hashes.assign(seq->block_hashes.begin() + have, seq->block_hashes.begin() + want);
    if (c->allocation() == KvConnector::Allocation::kBeforeLoad) {
      hit.num_tokens = have * bs;
      hit.num_queried_tokens = 0;  // admission, after the load, counts the query
      std::vector<CopyOp> copies;  // fresh blocks past the hit: nothing to copy
      if (!kv_->AllocateSlots(seq->id, hit.num_tokens, (want - have) * bs, 0, &hit, &copies)) {
        c->OnNoLoad(request, KvNoLoad::kNoRoom, have);  // prefill it here when admitted
        continue;
      }
      const auto blocks = kv_->blocks(seq->id);
      st.plan.blocks.assign(blocks.begin() + have, blocks.begin() + want);
      st.start_block = have;
      st.end_block = want;
    }
    seq->kv_load = st.plan.id;
    c->OnLoadPlanned(request, st.plan);
    kv_loads_.emplace(st.plan.id, std::move(st));
  }
}

std::vector<BlockId> Scheduler::AllocateKvLoad(uint64_t id, int64_t num_blocks, int64_t* first_block) {
  auto load = kv_loads_.find(id);
  if (load == kv_loads_.end()) return {};
  KvLoadState& st = load->second;
  *first_block = st.plan.first_block;
  auto it = seqs_.find(st.plan.seq);
  if (in_flight_ || it == seqs_.end() || num_blocks <= 0 || kv_->Holds(st.plan.seq)) return {};
  Sequence* seq = it->second.get();
  const int64_t bs = kv_->block_size();
  const int64_t end =
      st.plan.first_block + std::min<int64_t>(num_blocks, static_cast<int64_t>(st.plan.hashes.size()));
  PrefixHit hit = kv_->FindCachedPrefix(seq->block_hashes, seq->num_tokens());
  if (static_cast<int64_t>(hit.blocks.size()) > end) hit.blocks.resize(static_cast<size_t>(end));
  const int64_t have = static_cast<int64_t>(hit.blocks.size());
  // The pool lost blocks before the loaded ones meanwhile: they would not
  // form a prefix (rare; the prompt is computed from the pool's hit instead).
  if (have < st.plan.first_block || have >= end) return {};
  hit.num_tokens = have * bs;
  hit.num_queried_tokens = 0;  // admission counts the query
  std::vector<CopyOp> copies;  // fresh blocks past the hit: nothing to copy
  if (!kv_->AllocateSlots(seq->id, hit.num_tokens, (end - have) * bs, 0, &hit, &copies)) return {};
  *first_block = have;
  st.start_block = have;
  st.end_block = end;
  const auto blocks = kv_->blocks(seq->id);
  return std::vector<BlockId>(blocks.begin() + have, blocks.begin() + end);
}

void Scheduler::FinishKvLoad(uint64_t id, bool ok, std::span<const CacheSource> sources) {
  auto load = kv_loads_.find(id);
  if (load == kv_loads_.end()) return;
  const KvLoadState st = std::move(load->second);
  kv_loads_.erase(load);
  auto it = seqs_.find(st.plan.seq);
  if (it == seqs_.end()) {
    kv_->Free(st.plan.seq);  // ended meanwhile: its blocks were left to this call
    return;
  }
  Sequence* seq = it->second.get();
  seq->kv_load = 0;
  if (!kv_->Holds(seq->id)) {  // nothing was allocated (a lookup that found nothing usable)
    st.connector->OnLoadFinished(st.plan, 0, false);
    return;
  }
  if (ok) {
    kv_->CacheComputedBlocks(seq->id, seq->block_hashes, st.end_block * kv_->block_size(), seq->token_ids);
    const size_t plan_first = static_cast<size_t>(st.plan.first_block);
    const size_t start = static_cast<size_t>(st.start_block), end = static_cast<size_t>(st.end_block);
    if (seq->loaded_from.size() < end) seq->loaded_from.resize(end, CacheSource::kPool);
    for (size_t b = start; b < end; ++b) {
      const size_t i = b - plan_first;
      seq->loaded_from[b] = i < sources.size() ? sources[i] : st.connector->source();
    }
  }
  st.connector->OnLoadFinished(st.plan, ok ? st.end_block - st.plan.first_block : 0, ok);
  // Released blocks keep their hashes (ok) and sit at the most recently used
  // end of the free queue: the admission that follows finds them as a hit.
  kv_->Free(seq->id);
}

void Scheduler::ReleaseKvHold(const std::string& request_id) {
  auto it = kv_holds_.find(request_id);
  if (it == kv_holds_.end()) return;
  kv_->Free(it->second);
  kv_holds_.erase(it);
}

// Blocks the pool held before a load started are left as they are: a block
// loaded earlier and still cached stays counted as its load's source.
CacheWaterfall Scheduler::AccountPrompt(const Sequence& seq, int64_t hit_tokens) const {
  CacheWaterfall w;
  const int64_t bs = kv_->block_size();
  const int64_t prompt = seq.num_prompt_tokens;
  const int64_t hit_blocks = std::min(hit_tokens, prompt) / bs;
  for (int64_t b = 0; b < hit_blocks; ++b) {
    const size_t i = static_cast<size_t>(b);
    w[i < seq.loaded_from.size() ? seq.loaded_from[i] : CacheSource::kPool] += bs;
  }
  const int64_t full = std::max(hit_blocks, std::min<int64_t>(prompt / bs, static_cast<int64_t>(seq.block_hashes.size())));
  for (int64_t b = hit_blocks; b < full; ++b) w[MissReason(seq, b, full)] += bs;
  w[ComputeReason::kTail] += prompt - full * bs;
  return w;
}

// Order: what the pool still holds (only the capped last block), then the
// connectors' knowledge (a tier's write-through), then the pool's memory of
// evictions. A block cached under another cache_salt is not detectable here
// (its hash differs from the first block on): it counts as no_prefix.
ComputeReason Scheduler::MissReason(const Sequence& seq, int64_t block, int64_t full_blocks) const {
  // prompt_logprobs never reads the prefix cache: every block is computed.
  if (!kv_->caching_enabled() || seq.params().prompt_logprobs) return ComputeReason::kNoPrefix;
  const BlockHash& h = seq.block_hashes[static_cast<size_t>(block)];
  if (block + 1 == full_blocks && seq.num_prompt_tokens % kv_->block_size() == 0 && kv_->pool().Lookup(h)) {
    return ComputeReason::kTail;
  }
  for (const KvConnector* c : options_.kv_connectors) {
    if (auto r = c->MissReason(h)) return *r;
  }
  return kv_->RecentlyEvicted(h) ? ComputeReason::kEvicted : ComputeReason::kNoPrefix;
}

bool Scheduler::WaitingOnLoadsOnly() const {
  if (!running_.empty() || waiting_.empty()) return false;
  return std::all_of(waiting_.begin(), waiting_.end(), [](const Sequence* s) { return s->kv_load != 0; });
}

}  // namespace tessera
