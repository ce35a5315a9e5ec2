#include "scheduler/kv_cache_manager.h"

#include <algorithm>
#include <cassert>

namespace tessera {

StatusOr<int32_t> NumBlocksForBudget(int64_t budget_bytes, int64_t kv_bytes_per_token, int32_t block_size) {
  if (kv_bytes_per_token <= 0 || block_size <= 0) {
    return InvalidArgument("KV sizing: bytes per token and block size must be positive");
  }
  const int64_t per_block = kv_bytes_per_token * block_size;
  const int64_t n = budget_bytes / per_block;
  if (n < 1) {
    return InvalidArgument("KV sizing: a budget of " + std::to_string(budget_bytes) +
                           " bytes holds no block of " + std::to_string(per_block) + " bytes");
  }
  return static_cast<int32_t>(std::min<int64_t>(n, INT32_MAX - 1));
}

StatusOr<std::unique_ptr<KvCacheManager>> KvCacheManager::Create(const KvCacheOptions& options) {
  if (options.num_blocks <= 0) return InvalidArgument("KV cache: num_blocks must be positive");
  if (options.block_size <= 0) return InvalidArgument("KV cache: block_size must be positive");
  return std::unique_ptr<KvCacheManager>(new KvCacheManager(options));
}

KvCacheManager::KvCacheManager(const KvCacheOptions& options)
    : block_size_(options.block_size),
      hash_scheme_(options.hash_scheme),
      pool_(options.num_blocks, options.enable_prefix_caching),
      sink_(options.event_sink),
      tap_(static_cast<size_t>(std::clamp<int64_t>(int64_t{2} * options.num_blocks, 1024, 131072))) {
  tap_.next = sink_.get();
  pool_.set_event_sink(&tap_);
}

void KvCacheManager::EvictionTap::OnBlocksStored(std::optional<BlockHash> parent, std::span<const BlockHash> hashes,
                                                 std::span<const int32_t> token_ids, int32_t block_size) {
  if (next) next->OnBlocksStored(parent, hashes, token_ids, block_size);
}

void KvCacheManager::EvictionTap::OnBlocksRemoved(std::span<const BlockHash> hashes) {
  for (const BlockHash& h : hashes) evicted.Insert(h);
  if (next) next->OnBlocksRemoved(hashes);
}

// The pool reports a full reset this way only when it cannot name the hashes
// cheaply; they are forgotten, not listed as evicted.
void KvCacheManager::EvictionTap::OnAllBlocksCleared() {
  if (next) next->OnAllBlocksCleared();
}

PrefixHit KvCacheManager::FindCachedPrefix(std::span<const BlockHash> hashes, int64_t num_tokens) const {
  PrefixHit hit;
  if (!pool_.caching_enabled() || num_tokens <= 0) return hit;
  hit.num_queried_tokens = num_tokens;
  const size_t max_blocks = std::min<size_t>(hashes.size(), static_cast<size_t>((num_tokens - 1) / block_size_));
  for (size_t i = 0; i < max_blocks; ++i) {
    auto b = pool_.Lookup(hashes[i]);
    if (!b) break;
    hit.blocks.push_back(*b);
  }
  hit.num_tokens = static_cast<int64_t>(hit.blocks.size()) * block_size_;
  return hit;
}

bool KvCacheManager::AllocateSlots(SeqId seq, int64_t num_computed, int64_t num_new, int64_t lookahead,
                                   const PrefixHit* hit, std::vector<CopyOp>* copies) {
  auto it = seqs_.find(seq);
  const std::vector<BlockId> none;
  const std::vector<BlockId>& held = it == seqs_.end() ? none : it->second.blocks;
  const int64_t hit_blocks = hit ? static_cast<int64_t>(hit->blocks.size()) : 0;
  assert(!hit || (held.empty() && num_computed == hit->num_tokens));

  // Count what this costs before touching anything.
  const int64_t required = BlocksForTokens(num_computed + num_new + lookahead);
  const int64_t have = static_cast<int64_t>(held.size()) + hit_blocks;
  int64_t need = std::max<int64_t>(0, required - have);
  const int64_t first_write = num_computed / block_size_;
  for (int64_t i = first_write; i < static_cast<int64_t>(held.size()) && num_new > 0; ++i) {
    if (pool_.ref_count(held[i]) > 1) ++need;  // shared: must get a private copy
  }
  int64_t hit_free = 0;  // hit blocks sitting in the free queue leave it when touched
  if (hit) {
    for (BlockId b : hit->blocks) hit_free += pool_.ref_count(b) == 0;
  }
  if (!pool_.EnsureFree(static_cast<int32_t>(need + hit_free))) return false;

  SeqBlocks& s = seqs_[seq];
  if (hit) {
    for (BlockId b : hit->blocks) {
      pool_.Touch(b);
      s.blocks.push_back(b);
    }
    s.num_cached = hit_blocks;
    if (hit->num_queried_tokens > 0) {  // an admission's lookup (a load's hold counts at its admission)
      stats_.prefix_queries += hit->num_queried_tokens;
      stats_.prefix_hits += hit->num_tokens;
    }
  }
  for (int64_t i = first_write; i < static_cast<int64_t>(s.blocks.size()) && num_new > 0; ++i) {
    const BlockId old = s.blocks[i];
    if (pool_.ref_count(old) <= 1) continue;
    const BlockId fresh = pool_.Allocate(1)[0];
    if (i * block_size_ < num_computed) {  // holds computed tokens: copy them
      copies->push_back({old, fresh});
      ++stats_.cow_copies;
    }
    pool_.Release(old);
    s.blocks[i] = fresh;
  }
  if (required > static_cast<int64_t>(s.blocks.size())) {
    for (BlockId b : pool_.Allocate(static_cast<int32_t>(required - s.blocks.size()))) s.blocks.push_back(b);
  }
  return true;
}

void KvCacheManager::CacheComputedBlocks(SeqId seq, std::span<const BlockHash> hashes, int64_t num_computed,
                                         std::span<const int32_t> token_ids,
                                         std::vector<std::pair<BlockId, BlockHash>>* newly_cached) {
  if (!pool_.caching_enabled()) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqBlocks& s = it->second;
  const int64_t full = std::min<int64_t>({num_computed / block_size_, static_cast<int64_t>(s.blocks.size()),
                                          static_cast<int64_t>(hashes.size())});
  const bool report = sink_ && static_cast<int64_t>(token_ids.size()) >= full * block_size_;
  int64_t run = -1;  // first block of the current run of newly registered blocks
  auto flush = [&](int64_t end) {
    if (run < 0) return;
    std::optional<BlockHash> parent;
    if (run > 0) parent = hashes[run - 1];
    sink_->OnBlocksStored(parent, hashes.subspan(run, end - run),
                          token_ids.subspan(run * block_size_, (end - run) * block_size_), block_size_);
    run = -1;
  };
  for (int64_t i = s.num_cached; i < full; ++i) {
    const bool stored = pool_.Cache(s.blocks[i], hashes[i]);
    if (stored && newly_cached) newly_cached->emplace_back(s.blocks[i], hashes[i]);
    if (!report) continue;
    if (stored && run < 0) run = i;
    if (!stored) flush(i);
  }
  if (report) flush(full);
  s.num_cached = std::max(s.num_cached, full);
}

void KvCacheManager::RetainPrefix(SeqId seq, int64_t num_blocks, int64_t until_ns) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  const SeqBlocks& s = it->second;
  const int64_t n = std::min<int64_t>(num_blocks, s.num_cached);
  for (int64_t i = 0; i < n; ++i) {
    if (pool_.is_cached(s.blocks[i])) pool_.Retain(s.blocks[i], until_ns);
  }
}

void KvCacheManager::Fork(SeqId parent, SeqId child, int64_t num_computed) {
  auto it = seqs_.find(parent);
  assert(!seqs_.count(child));
  SeqBlocks& c = seqs_[child];
  if (it == seqs_.end()) return;
  const SeqBlocks& p = it->second;
  const int64_t n = std::min<int64_t>(BlocksForTokens(num_computed), static_cast<int64_t>(p.blocks.size()));
  for (int64_t i = 0; i < n; ++i) {
    pool_.Touch(p.blocks[i]);
    c.blocks.push_back(p.blocks[i]);
  }
  c.num_cached = std::min(p.num_cached, n);
}

void KvCacheManager::Free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) pool_.Release(*b);
  seqs_.erase(it);
}

std::span<const BlockId> KvCacheManager::blocks(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return it->second.blocks;
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s = stats_;
  s.evictions = pool_.num_evictions();
  return s;
}

}  // namespace tessera
