#include "scheduler/block_pool.h"

#include <cassert>

namespace tessera {

BlockPool::BlockPool(int32_t num_blocks, bool enable_caching)
    : num_blocks_(num_blocks), caching_(enable_caching), blocks_(num_blocks + 2) {
  assert(num_blocks > 0);
  for (bool retained : {false, true}) {
    Meta& s = blocks_[Sentinel(retained)];
    s.prev = s.next = Sentinel(retained);
  }
  for (BlockId b = 0; b < num_blocks_; ++b) PushBack(b, /*retained=*/false);
}

void BlockPool::PushBack(BlockId b, bool retained) {
  const int32_t sentinel = Sentinel(retained);
  Meta& s = blocks_[sentinel];
  Meta& m = blocks_[b];
  m.prev = s.prev;
  m.next = sentinel;
  blocks_[s.prev].next = b;
  s.prev = b;
  m.in_free_queue = true;
  if (!retained) {
    ++num_free_;
    return;
  }
  ++num_retained_free_;
  num_demoted_free_ += m.demoted;
  if (next_expiry_ == 0 || m.retain_until < next_expiry_) next_expiry_ = m.retain_until;
}

void BlockPool::Unlink(BlockId b) {
  Meta& m = blocks_[b];
  assert(m.in_free_queue);
  blocks_[m.prev].next = m.next;
  blocks_[m.next].prev = m.prev;
  m.prev = m.next = -1;
  m.in_free_queue = false;
  if (m.retain_until == 0) {
    --num_free_;
  } else {
    --num_retained_free_;
    num_demoted_free_ -= m.demoted;
  }
}

void BlockPool::ClearRetention(BlockId b) {
  Meta& m = blocks_[b];
  if (m.retain_until == 0) return;
  m.retain_until = 0;
  m.demoted = false;
  --num_retained_;
}

void BlockPool::Evict(BlockId b) {
  Meta& m = blocks_[b];
  if (!m.cached) return;
  by_hash_.erase(m.hash);
  m.cached = false;
  ++num_evictions_;
  if (sink_) sink_->OnBlocksRemoved(std::span<const BlockHash>(&m.hash, 1));
}

bool BlockPool::EnsureFree(int32_t n) {
  if (num_free_blocks() >= n) return true;
  if (demoter_ == nullptr) return false;
  const int32_t sentinel = Sentinel(true);
  for (int32_t b = blocks_[sentinel].next; b != sentinel && num_free_blocks() < n; b = blocks_[b].next) {
    Meta& m = blocks_[b];
    if (m.demoted || !demoter_->HoldUntil(m.hash, m.retain_until)) continue;
    m.demoted = true;
    ++num_demoted_free_;
  }
  return num_free_blocks() >= n;
}

std::vector<BlockId> BlockPool::Allocate(int32_t n) {
  assert(n <= num_free_blocks());
  std::vector<BlockId> out;
  out.reserve(n);
  int32_t retained_cursor = blocks_[Sentinel(true)].next;
  for (int32_t i = 0; i < n; ++i) {
    BlockId b = blocks_[num_blocks_].next;
    if (b == num_blocks_) {  // the ordinary queue is empty: a demoted retained block, LRU first
      while (!blocks_[retained_cursor].demoted) retained_cursor = blocks_[retained_cursor].next;
      b = retained_cursor;
      retained_cursor = blocks_[b].next;
    }
    Unlink(b);
    ClearRetention(b);
    Evict(b);
    blocks_[b].ref_count = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::Retain(BlockId b, int64_t until_ns) {
  Meta& m = blocks_[b];
  assert(m.cached);
  if (!m.cached || until_ns <= m.retain_until || until_ns <= now_ns_) return;
  const bool free = m.in_free_queue;
  if (free) Unlink(b);
  if (m.retain_until == 0) ++num_retained_;
  m.retain_until = until_ns;
  m.demoted = false;  // a lower tier's pin, if any, is for the earlier time
  if (free) PushBack(b, /*retained=*/true);
}

void BlockPool::ExpireRetention(int64_t now_ns) {
  now_ns_ = now_ns;
  if (next_expiry_ == 0 || now_ns < next_expiry_) return;
  next_expiry_ = 0;
  const int32_t sentinel = Sentinel(true);
  for (int32_t b = blocks_[sentinel].next; b != sentinel;) {
    const int32_t next = blocks_[b].next;
    Meta& m = blocks_[b];
    if (m.retain_until <= now_ns) {
      // An ordinary cached block again; it has been unused longest, so it goes first.
      Unlink(b);
      ClearRetention(b);
      const int32_t s = Sentinel(false);
      m.prev = s;
      m.next = blocks_[s].next;
      blocks_[blocks_[s].next].prev = b;
      blocks_[s].next = b;
      m.in_free_queue = true;
      ++num_free_;
    } else if (next_expiry_ == 0 || m.retain_until < next_expiry_) {
      next_expiry_ = m.retain_until;
    }
    b = next;
  }
}

std::optional<BlockId> BlockPool::Lookup(const BlockHash& hash) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::Touch(BlockId b) {
  Meta& m = blocks_[b];
  if (m.ref_count == 0) Unlink(b);
  ++m.ref_count;
}

void BlockPool::Release(BlockId b) {
  Meta& m = blocks_[b];
  assert(m.ref_count > 0);
  if (--m.ref_count != 0) return;
  if (m.retain_until != 0 && m.retain_until <= now_ns_) ClearRetention(b);
  PushBack(b, /*retained=*/m.retain_until != 0);
}

bool BlockPool::Cache(BlockId b, const BlockHash& hash) {
  Meta& m = blocks_[b];
  if (!caching_ || m.cached) return false;
  if (!by_hash_.emplace(hash, b).second) return false;
  m.cached = true;
  m.hash = hash;
  return true;
}

void BlockPool::ResetPrefixCache() {
  // The KV is no longer valid: holds end with it (weights changed).
  const int32_t sentinel = Sentinel(true);
  while (blocks_[sentinel].next != sentinel) {
    const BlockId b = blocks_[sentinel].next;
    Unlink(b);
    ClearRetention(b);
    PushBack(b, /*retained=*/false);
  }
  next_expiry_ = 0;
  std::vector<BlockHash> dropped;
  for (BlockId b = 0; b < num_blocks_; ++b) {
    if (blocks_[b].cached && blocks_[b].ref_count == 0) {
      by_hash_.erase(blocks_[b].hash);
      blocks_[b].cached = false;
      if (sink_) dropped.push_back(blocks_[b].hash);
    }
  }
  if (!sink_) return;
  if (by_hash_.empty()) {
    sink_->OnAllBlocksCleared();
  } else if (!dropped.empty()) {
    sink_->OnBlocksRemoved(dropped);
  }
}

std::vector<BlockId> BlockPool::FreeQueue() const {
  std::vector<BlockId> out;
  for (int32_t b = blocks_[num_blocks_].next; b != num_blocks_; b = blocks_[b].next) out.push_back(b);
  return out;
}

std::vector<BlockId> BlockPool::RetainedQueue() const {
  std::vector<BlockId> out;
  const int32_t s = Sentinel(true);
  for (int32_t b = blocks_[s].next; b != s; b = blocks_[b].next) out.push_back(b);
  return out;
}

}  // namespace tessera
